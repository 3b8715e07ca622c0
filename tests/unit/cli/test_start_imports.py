"""Every ``riskppo`` command starts by importing the command line's modules; the packages that
only some work needs (the compiler's tracer, the bootstrap and HAC statistics, plotting) are
imported where that work is done, so a command that fails on its arguments, or never plots,
does not wait seconds for them."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

# import cost on a 2-core machine, roughly: torch._dynamo (with sympy) 2.5 s, arch (with
# statsmodels) 1.5 s, empyrical 0.8 s, matplotlib 0.5 s
DEFERRED = ("torch._dynamo", "sympy", "arch", "statsmodels", "matplotlib", "empyrical")


def test_the_command_lines_modules_leave_the_heavy_packages_unimported() -> None:
    code = (
        "import json, sys\n"
        "import riskppo.cli.main, riskppo.cli.runner, riskppo.cli.universe\n"
        "import riskppo.walkforward.run, riskppo.live.signal, riskppo.pbt.report\n"
        f"print(json.dumps([m for m in {DEFERRED!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_listed_user_error_names_an_exception_class() -> None:
    """The one-line errors are recognised by their classes' names: each name must be a real
    exception class (a renamed or moved class would otherwise print a traceback)."""
    from riskppo.cli.errors import USER_ERRORS

    for name in USER_ERRORS:
        module, _, cls = name.rpartition(".")
        kind = getattr(importlib.import_module(module), cls)
        assert issubclass(kind, BaseException) and f"{kind.__module__}.{kind.__qualname__}" == name


def test_a_user_error_is_recognised_without_importing_the_rest_of_riskppo() -> None:
    """A subclass is recognised through its base (most specific listed class first), and
    recognising one imports nothing heavy (riskppo.pbt would bring in the backtest)."""
    code = (
        "import json, sys\n"
        "from riskppo.cli.errors import user_error\n"
        "from riskppo.runs.lock import RunLockError\n"
        "from riskppo.runs.rundir import RunDirError\n"
        "class Mine(RunDirError): pass\n"
        "lines = [user_error(RunLockError('held')), user_error(Mine('gone')),\n"
        "         user_error(ValueError('bug'))]\n"
        "print(json.dumps([lines, 'riskppo.pbt' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines, pbt = json.loads(out.stdout.strip().splitlines()[-1])
    assert lines == ["riskppo: run directory locked: held", "riskppo: gone", None]
    assert not pbt
