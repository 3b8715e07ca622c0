"""Nobody outside the façade's room (``riskppo/agent/``) writes a model's attributes: other
packages call its methods (``from_snapshot``, ``adopt``, ``reset_counters``, ``attach_bc``, ...).

A practical heuristic over the package's source: an assignment (plain, augmented, annotated,
unpacked, ``del`` or ``setattr``) to an attribute of a name that conventionally holds a model —
``model``, ``target``, ``agent`` (or ``self.model`` and the like)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[3] / "riskppo"
ROOM = PACKAGE / "agent"
MODEL_NAMES = {"model", "target", "agent"}


def _is_model(node: ast.expr) -> bool:
    """``model``, ``target``, ``agent``, ``<anything>.model`` (and the other two), or an object
    reached from one (``model.config``)."""
    while isinstance(node, ast.Attribute):
        if node.attr in MODEL_NAMES:
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id in MODEL_NAMES


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif isinstance(node, ast.Delete):
        found = list(node.targets)
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        found = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        found = [node.optional_vars]
    else:
        return []
    flat: list[ast.expr] = []
    while found:  # (a, model.x) = ... unpacks
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found.extend(t.elts)
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            flat.append(t)
    return flat


def model_writes(source: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every write to an attribute of a model-named object in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for t in _targets(node):
            if isinstance(t, ast.Attribute) and _is_model(t.value):
                found.append((t.lineno, ast.unparse(t)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and _is_model(node.args[0])
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def outside_writes(package: Path = PACKAGE) -> list[str]:
    """``file:line: target`` of every model attribute written outside the façade's room."""
    room = package / "agent"
    bad = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(room):
            continue
        rel = path.relative_to(package.parent)
        bad += [f"{rel}:{line}: {t}" for line, t in model_writes(path.read_text())]
    return bad


def test_nobody_outside_the_room_writes_a_models_attributes() -> None:
    assert outside_writes() == []


def test_the_scan_sees_every_kind_of_write() -> None:
    source = """
model.state = 1
target.env: object = None
agent.n += 1
a, (b, model.x) = 1, (2, 3)
del model.bc
self.model.rollout_steps = 0
setattr(target, "state", 2)
for model.y in []: pass
model.config.ppo = 3  # through an object the model holds
member.state = 4  # not a model's name
model["x"] = 5  # an item, not an attribute
"""
    assert [line for line, _ in model_writes(source)] == [2, 3, 4, 5, 6, 7, 8, 9, 10]


def test_the_room_is_the_facades_package() -> None:
    assert ROOM.is_dir() and (ROOM / "facade.py").is_file()
