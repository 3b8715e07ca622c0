"""design §11: subpackages import only downward — no import cycle between them, whether the import
sits at module level or inside a function (a function-level import would only hide one) — and each
room imports only the rooms below it (:data:`LAYERS`); inside a room, its folders and modules
form no circle either and, where the room orders them (:data:`ROOM_LAYERS`), import only
downward.

Entry points (``"module:name"`` strings, as in Gymnasium's registry and
:class:`~riskppo.envs.registration.EnvKind`) are not imports: they name a plug-in the registry
loads on use."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "riskppo"


def _unit(module: str) -> str | None:
    """The subpackage (or top-level module) an absolute ``riskppo.…`` import belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "riskppo" and len(parts) > 1 else None


def _is_room(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """Edges ``unit → unit`` of every ``from riskppo.X… import`` in the package's source, typing
    imports included (a TYPE_CHECKING import is a cycle in the design too)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).parts
        src = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module == "riskppo":
                # from riskppo import core (a room), not from riskppo import __version__
                names = [f"riskppo.{a.name}" for a in node.names if _is_room(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                dst = _unit(name)
                if dst and dst != src and src != "__init__":
                    edges[src].add(dst)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_subpackages():
    assert cycles(import_graph()) == []


def _module_name(path: Path, package: Path) -> str:
    """``riskppo/algo/loop.py`` → ``riskppo.algo.loop``; an ``__init__`` is its package."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The package modules one import statement of ``module`` names: ``from p import m`` names the
    module ``p.m`` where there is one (else ``p``); relative imports are resolved."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, *([node.module] if node.module else [])])
    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return [n for n in names if n in known]


@cache
def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Edges ``module → module`` of every import between two files of the package (function-level
    and typing imports included: each is a cycle in the design, only hidden); read once per
    package (every room's check reads it)."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    known = set(files)
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            edges[name].update(t for t in _imported(node, name, is_package, known) if t != name)
    return edges


def test_no_import_cycle_between_files():
    """Not even two files of one package import each other, directly or round a circle."""
    assert cycles(module_graph()) == []


def test_module_graph_sees_relative_and_module_imports(tmp_path):
    pkg = tmp_path / "riskppo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from riskppo.sub.c import x\n")
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..sub import a\n"
    )
    assert cycles(module_graph(pkg)) == [["riskppo.sub.a", "riskppo.sub.b", "riskppo.sub.c"]]


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The rooms, lowest first: a room may import only rooms of an earlier layer (core ← nn ← algo ←
# agent ← runs ← cli). Top-level modules are rooms of their own. Judging one trained run
# (evaluation/) sits below what uses it: the walk-forward study that trains and judges many
# (walkforward/), deployment (live/) and population-based training (pbt/). The command line
# (cli/) is the top room: the application; everything below it is the library.
LAYERS: list[set[str]] = [
    {"version", "jsonable", "safefs", "lazy", "logs"},
    {"config"},
    {"core", "stats"},
    {"nn", "demos"},
    {"optim", "adversarial", "envs"},
    {"algo"},
    {"persist", "monitor"},
    {"agent"},
    {"runs"},
    {"evaluation"},
    {"walkforward", "live", "pbt"},
    {"cli"},
]
# Rooms that read only a few of the algorithm's modules (its state and log types), or none.
ALGO_READS = {
    "persist": {
        "riskppo.algo.state",
        "riskppo.algo.constraints.cvar",  # the format-1 checkpoint migration
        "riskppo.algo.returns",
    },
    "monitor": {"riskppo.algo.log"},
    "evaluation": set(),
    "walkforward": set(),
    "live": set(),
    "pbt": set(),
    "adversarial": set(),
}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """``src → dst`` for every import of a room that is not below ``src`` (or not placed)."""
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    bad = []
    for src, dsts in sorted(edges.items()):
        for dst in sorted(dsts):
            if src not in rank or dst not in rank or rank[dst] >= rank[src]:
                bad.append(f"{src} → {dst}")
    return bad


def algo_reads(edges: dict[str, set[str]]) -> list[str]:
    """Imports of ``riskppo.algo`` modules by a room that may read only :data:`ALGO_READS`."""
    bad = []
    for src, dsts in sorted(edges.items()):
        allowed = ALGO_READS.get(src.split(".")[1] if "." in src else src)
        if allowed is not None:
            reads = {d for d in dsts if d.startswith("riskppo.algo")}
            bad += [f"{src} → {d}" for d in sorted(reads - allowed)]
    return bad


def test_rooms_import_only_rooms_below():
    assert upward_imports(import_graph()) == []


def test_persist_monitor_evaluation_read_no_algorithm_internals():
    assert algo_reads(module_graph()) == []


def test_the_layer_rule_sees_an_upward_import():
    assert upward_imports({"algo": {"core", "agent"}, "core": {"nn"}, "new": {"core"}}) == [
        "algo → agent",
        "core → nn",
        "new → core",
    ]
    edges = {"riskppo.evaluation.x": {"riskppo.algo.collect", "riskppo.agent"}}
    assert algo_reads({**edges, "riskppo.monitor.w": {"riskppo.algo.log"}}) == [
        "riskppo.evaluation.x → riskppo.algo.collect"
    ]


def test_the_command_line_is_the_top_room_and_nothing_imports_it():
    """The library never reaches up into the application: no module outside ``riskppo.cli``
    imports one of it (the package's ``__init__`` included)."""
    assert LAYERS[-1] == {"cli"}
    up = sorted(
        f"{src} → {dst}"
        for src, dsts in module_graph().items()
        if not (src == "riskppo.cli" or src.startswith("riskppo.cli."))
        for dst in dsts
        if dst == "riskppo.cli" or dst.startswith("riskppo.cli.")
    )
    assert up == []


# Inside a room: its folders and top-level modules ("units"), lowest first. A unit may import only
# units of an earlier layer; a room listed here must place every unit it has. The env kinds
# (trading/, portfolio/) sit on the shared execution mechanics (execution/) and the market data
# and estimators (market/), never the other way round.
ROOM_LAYERS: dict[str, list[set[str]]] = {
    "envs": [
        {"market"},
        {"causality", "episodes", "execution", "tasks"},
        {"feature_registry"},
        {"features"},
        {"registration"},
        {"kwargs_check"},
        {"vec"},
        {"trading", "portfolio"},
        {"teacher"},
    ],
    # The walk-forward: its schedule, then the cells and the choice among candidates, their
    # statistics, the reports, and the runner over them all.
    "walkforward": [
        {"plan", "kinds"},
        {"cells", "seeds"},
        {"select", "analysis"},
        {"report", "portfolio"},
        {"run"},
    ],
    "live": [{"inputs"}, {"decide", "paper_state"}, {"signal"}, {"paper"}],
    # Judging one trained run: what runs beside the agent on the same bars and the statistics
    # (references, baselines, the supervised ridge, the random-timing null, metrics, the trial
    # count, the limit's backtest), the judged result (the verdict, the universe table), its
    # charts and report, the backtest that assembles them (single asset, portfolio), and what
    # reads a backtest (the run summary, robustness); the kinds' hooks on top.
    "evaluation": [
        {
            "episode",
            "baselines",
            "metrics",
            "references",
            "supervised",
            "timing_null",
            "trials",
            "limit_backtest",
        },
        {"backtest_result", "verdict", "universe"},
        {"plots", "report"},
        {"backtest", "portfolio"},
        {"summary", "robustness"},
        {"kinds"},
    ],
}


def room_graph(room: str, package: Path = PACKAGE) -> dict[str, set[str]]:
    """Edges ``unit → unit`` between the folders and top-level modules of ``riskppo/<room>``
    (every import, function-level and typing ones included; the room's ``__init__``, which only
    re-exports lazily, is left out)."""
    prefix = f"{package.name}.{room}."
    edges: dict[str, set[str]] = defaultdict(set)
    for src, dsts in module_graph(package).items():
        if not src.startswith(prefix):
            continue
        a = src[len(prefix) :].split(".")[0]
        for dst in dsts:
            b = dst[len(prefix) :].split(".")[0] if dst.startswith(prefix) else None
            if b is not None and b != a:
                edges[a].add(b)
    return edges


def room_upward_imports(edges: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """``src → dst`` for every import inside a room that is not below ``src`` (an unplaced unit
    is an error too)."""
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    bad = []
    for src, dsts in sorted(edges.items()):
        for dst in sorted(dsts):
            if src not in rank or dst not in rank or rank[dst] >= rank[src]:
                bad.append(f"{src} → {dst}")
    return bad


def _rooms() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def test_no_import_cycle_between_the_folders_of_a_room():
    found = {room: cycles(room_graph(room)) for room in _rooms()}
    assert {room: c for room, c in found.items() if c} == {}


def test_the_folders_of_a_room_import_only_folders_below():
    bad = {
        room: room_upward_imports(room_graph(room), layers) for room, layers in ROOM_LAYERS.items()
    }
    assert {room: b for room, b in bad.items() if b} == {}


def test_the_room_rule_sees_an_upward_import_and_a_circle(tmp_path):
    """A function-level import from a lower folder of a room up into a higher one is seen."""
    pkg = tmp_path / "riskppo"
    for folder in ("envs", "envs/market", "envs/trading", "envs/vec"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "envs" / "market" / "a.py").write_text(
        "def f():\n    from riskppo.envs.trading.b import x\n"
    )
    (pkg / "envs" / "trading" / "b.py").write_text("from riskppo.envs.vec import c\n")
    (pkg / "envs" / "vec" / "c.py").write_text("from riskppo.envs.trading import d\n")
    (pkg / "envs" / "trading" / "d.py").write_text("")
    edges = room_graph("envs", pkg)
    layers = [{"market"}, {"vec"}, {"trading"}]
    assert room_upward_imports(edges, layers) == ["market → trading", "vec → trading"]
    assert cycles(edges) == [["trading", "vec"]]
