"""Old module paths of the package split (riskppo/_aliases.py): each still imports, warns with the
new path, and is the new module itself; checkpoints record no module path, so old ones load."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import riskppo
from riskppo._aliases import MOVED, OLD_PACKAGES

FIXTURE = Path(__file__).parents[1] / "fixtures" / "checkpoint_v1"


def _forget(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Import ``name`` afresh in this test; afterwards ``sys.modules`` is as it was before."""
    monkeypatch.setitem(sys.modules, name, None)  # so that the undo also drops a new entry
    monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_warns_and_is_the_new_module(monkeypatch, old, new):
    _forget(monkeypatch, old)
    message = f"^{re.escape(old)} is deprecated .*; use {re.escape(new)}$"
    with pytest.warns(DeprecationWarning, match=message):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__.name == new


def test_an_old_package_gives_its_old_names_with_a_warning(monkeypatch):
    from riskppo.agent import DistributionalPPO
    from riskppo.persist.checkpoint import CheckpointError

    for name in [*OLD_PACKAGES, "riskppo.data.demos"]:
        _forget(monkeypatch, name)
    with pytest.warns(DeprecationWarning, match="use riskppo.agent.DistributionalPPO$"):
        from riskppo.train import DistributionalPPO as old_ppo
    with pytest.warns(DeprecationWarning, match="use riskppo.persist.checkpoint.CheckpointError$"):
        from riskppo.train import CheckpointError as old_error
    assert old_ppo is DistributionalPPO and old_error is CheckpointError
    with pytest.raises(ImportError, match=r"cannot import name 'nope' from 'riskppo\.train'"):
        from riskppo.train import nope  # noqa: F401
    with pytest.warns(DeprecationWarning, match="use riskppo.demos.files$"):
        from riskppo.data import demos
    assert demos is importlib.import_module("riskppo.demos.files")


def test_the_new_paths_are_files_and_the_old_ones_are_gone():
    package = Path(riskppo.__file__).parent
    for old, new in MOVED.items():
        path = package.parent / new.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), new
        assert not (package.parent / f"{old.replace('.', '/')}.py").exists(), old
    for old in OLD_PACKAGES:
        assert not (package.parent / old.replace(".", "/")).exists(), old


def test_a_checkpoint_records_no_module_path():
    """What a checkpoint stores names no Python module, so one saved before the split loads
    after it (tests/unit/algo/test_training_state.py loads this fixture, saved by version 1)."""
    for path in FIXTURE.iterdir():
        data = path.read_bytes()
        assert not re.search(rb"riskppo\.[a-z_]", data), path.name
