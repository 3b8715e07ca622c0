"""riskppo.safefs in a child process under a file-size limit: a refused write leaves the old file
and no temporary file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_a_write_over_the_file_size_limit_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "latest"
    target.write_text("ckpt-1")
    code = textwrap.dedent(
        """
        import errno, resource, signal, sys
        from pathlib import Path
        from riskppo.safefs import write_text_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
        try:
            write_text_atomic(Path(sys.argv[1]), "x" * 1000)
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, check=True
    )
    assert res.stdout.strip() == "EFBIG", res.stderr
    assert target.read_text() == "ckpt-1"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]
