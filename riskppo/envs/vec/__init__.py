"""Vector environments: building riskppo's, and accepting Gymnasium's.

* :mod:`~riskppo.envs.vec.build`: the vec env a config or an env argument asks for (SB3's
  in-process or subprocess vec envs, the finite-input guard, observation normalisation);
* :mod:`~riskppo.envs.vec.native`: the natively vectorised envs used instead when they give the
  same episodes (the batched trading env, Gymnasium vector envs);
* :mod:`~riskppo.envs.vec.gym_vector` and :mod:`~riskppo.envs.vec.cartpole`: a Gymnasium
  ``VectorEnv`` behind SB3's VecEnv interface, and the single-env resets Gymnasium's native
  CartPole lacks;
* :mod:`~riskppo.envs.vec.infos`: the infos riskppo's vec env adds to each step, for envs that
  step all at once;
* :mod:`~riskppo.envs.vec.tensors`: observations in and actions out, as tensors.

``from riskppo.envs.vec import build_vec_env`` (any name of :mod:`~riskppo.envs.vec.build`, the
module this package was before) still works; it is imported on first use (PEP 562), so the
trading env's batched form can import the infos without building the vec env's module.
"""

from __future__ import annotations

from riskppo.lazy import lazy_names

__getattr__ = lazy_names(__name__, "riskppo.envs.vec.build")
