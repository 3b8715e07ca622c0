"""A YAML alias bomb is refused fast, in a child process whose memory is capped."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path


def _bomb(path: Path) -> int:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghi"
    for prev, cur in itertools.pairwise(names):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return len(text.encode())


def test_yaml_alias_bomb_rejected_fast_with_bounded_memory(tmp_path):
    path = tmp_path / "bomb.yaml"
    assert _bomb(path) < 600  # 9^9 ~ 387 million strings once expanded
    # A child process with a 1 GiB address-space cap and a 30 s timeout: before the guard this
    # took ~20 s and then died with MemoryError.
    code = textwrap.dedent(
        f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from riskppo.config import Config, ConfigError
        t = time.perf_counter()
        try:
            Config.from_yaml({str(path)!r})
        except ConfigError as e:
            print("REFUSED", time.perf_counter() - t, e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("REFUSED"), out.stdout + out.stderr[-2000:]
    seconds = float(out.stdout.split()[1])
    assert seconds < 2.0, out.stdout
    assert "alias bomb" in out.stdout and str(path) in out.stdout
