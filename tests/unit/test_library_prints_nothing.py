"""The library returns what it finds and only the command line prints (docs/design.md, Layout):
no module of riskppo outside ``riskppo/cli/`` calls ``print`` or imports ``rich.console`` — but
for the training output a Python user asks for, as in SB3 (``verbose``, ``progress_bar``). A line
a library function has for its user while it runs goes to its ``on_message`` (riskppo/logs.py).
An AST scan, like tests/unit/test_layers.py's."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "riskppo"
APPLICATION = "cli"  # the command line: riskppo/cli/

# (file, function) that may print, and why: what DistributionalPPO.learn shows when asked
ALLOWED_PRINTS: dict[tuple[str, str], str] = {
    ("agent/facade.py", "learn"): "the alert summary with monitor.verbose (SB3's verbose=1)",
    ("monitor/writer.py", "log_update"): "an update's line with monitor.verbose >= 1",
    ("monitor/progress.py", "_print_line"): "the progress bar's plain lines (progress_bar)",
}
# files that may import rich.console, and why
ALLOWED_CONSOLE: dict[str, str] = {
    "monitor/progress.py": "the progress bar on a terminal or in Jupyter (progress_bar)",
}


def _nodes(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Every node of ``tree`` with the name of the function it sits in (``<module>`` outside
    any; a nested function's own name)."""
    stack: list[tuple[str, ast.AST]] = [("<module>", tree)]
    while stack:
        func, node = stack.pop()
        yield func, node
        inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else func
        stack.extend((inner, child) for child in ast.iter_child_nodes(node))


def _is_print(node: ast.AST) -> bool:
    """``print(…)`` (the builtin, or rich's imported under that name)."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    )


def _imports_console(node: ast.AST) -> bool:
    """``import rich.console``, ``from rich.console import …`` or ``from rich import console``."""
    if isinstance(node, ast.Import):
        return any(a.name == "rich.console" for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        if node.module == "rich.console":
            return True
        return node.module == "rich" and any(a.name == "console" for a in node.names)
    return False


def printing(package: Path = PACKAGE) -> list[str]:
    """``file:line function: what`` for each ``print`` call and ``rich.console`` import in a
    library module of ``package`` (every file but the command line's) not allowed above."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.split("/")[0] == APPLICATION:
            continue
        for func, node in _nodes(ast.parse(path.read_text())):
            line = getattr(node, "lineno", 0)
            if _is_print(node) and (rel, func) not in ALLOWED_PRINTS:
                found.append(f"{rel}:{line} {func}: print")
            elif _imports_console(node) and rel not in ALLOWED_CONSOLE:
                found.append(f"{rel}:{line} {func}: rich.console")
    return sorted(found)


def test_no_library_module_prints():
    assert printing() == []


def test_every_allowed_print_is_still_there():
    """An allowance whose print has gone (moved or renamed) is dropped, not left open."""
    prints = set()
    for rel, _ in ALLOWED_PRINTS:
        tree = ast.parse((PACKAGE / rel).read_text())
        prints |= {(rel, func) for func, node in _nodes(tree) if _is_print(node)}
    assert prints == set(ALLOWED_PRINTS)
    for rel in ALLOWED_CONSOLE:
        tree = ast.parse((PACKAGE / rel).read_text())
        assert any(_imports_console(n) for n in ast.walk(tree)), rel


def test_the_scan_sees_a_print_and_a_console(tmp_path: Path):
    pkg = tmp_path / "riskppo"
    (pkg / "evaluation").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "evaluation" / "a.py").write_text(
        "from rich import console\n\ndef f():\n    def g():\n        print('x')\n"
    )
    (pkg / "evaluation" / "b.py").write_text("import rich.console\nlogger.info('fine')\n")
    (pkg / "agent.py").write_text("def save():\n    print('not in learn')\n")
    (pkg / "cli" / "main.py").write_text("from rich.console import Console\nprint('ok')\n")
    assert printing(pkg) == [
        "agent.py:2 save: print",
        "evaluation/a.py:1 <module>: rich.console",
        "evaluation/a.py:5 g: print",
        "evaluation/b.py:1 <module>: rich.console",
    ]
