"""Every ``riskppo`` command starts by importing the command line's modules; the packages that
only some work needs (the compiler's tracer, the bootstrap and HAC statistics, plotting) are
imported where that work is done, so a command that fails on its arguments, or never plots,
does not wait seconds for them."""

from __future__ import annotations

import json
import subprocess
import sys

# import cost on a 2-core machine, roughly: torch._dynamo (with sympy) 2.5 s, arch (with
# statsmodels) 1.5 s, empyrical 0.8 s, matplotlib 0.5 s
DEFERRED = ("torch._dynamo", "sympy", "arch", "statsmodels", "matplotlib", "empyrical")


def test_the_command_lines_modules_leave_the_heavy_packages_unimported() -> None:
    code = (
        "import json, sys\n"
        "import riskppo.cli.main, riskppo.cli.runner, riskppo.cli.universe, riskppo.walkforward.run\n"
        "import riskppo.live.signal, riskppo.pbt.report\n"
        f"print(json.dumps([m for m in {DEFERRED!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
