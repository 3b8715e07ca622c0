"""Adversarial robustness (R-ADV): observation attacks and the SA-PPO regulariser. The robustness
evaluation (``riskppo eval RUN_DIR --attack pgd --eps 0.01,0.05,0.1``) is
:mod:`riskppo.evaluation.robustness`."""

from riskppo.adversarial.attacks import ATTACKS, StepInput, get_attack, pgd
from riskppo.adversarial.regularizer import sa_eps, sa_regularizer

__all__ = ["ATTACKS", "StepInput", "get_attack", "pgd", "sa_eps", "sa_regularizer"]
