"""Skip marks for the tests that need a compiler, each with the reason it is missing; and
:func:`without_kernel_notice` and :func:`env_without_kernel`, for the CLI tests that must pass
with or without one.

- :func:`needs_c_compiler`: the C compiler that :mod:`riskppo.nn.native` builds its kernel with
  (``$CC``, else ``cc``, ``gcc`` or ``clang`` on ``PATH``) — for the tests of that loader, which
  build into caches of their own.
- :func:`needs_c_kernel`: the loaded C kernel itself (no compiler, ``RISKPPO_NATIVE=0``, a
  refused cache: the loader's logged reason).
- :func:`needs_cxx_compiler`: the C++ compiler ``torch.compile``'s CPU backend (inductor) builds
  its kernels with (``$CXX``, else ``g++``).
"""

from __future__ import annotations

import os

import pytest

from riskppo.nn import native


def needs_c_compiler() -> pytest.MarkDecorator:
    missing = native._compiler() is None
    return pytest.mark.skipif(
        missing, reason="no C compiler ($CC, cc, gcc or clang): the native kernel cannot be built"
    )


def needs_c_kernel() -> pytest.MarkDecorator:
    missing = native.kernel() is None
    why = native.unavailable_reason()
    return pytest.mark.skipif(missing, reason=f"the native C kernel is unavailable: {why}")


def needs_cxx_compiler() -> pytest.MarkDecorator:
    from torch._inductor import cpp_builder, exc

    why = None
    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler as e:
        why = str(e)
    return pytest.mark.skipif(why is not None, reason=f"torch.compile cannot build: {why}")


# The one line a CLI prints where the C kernel is unavailable (no compiler, RISKPPO_NATIVE=0).
KERNEL_NOTICE = "riskppo: warning: native LSTM kernel unavailable ("


def without_kernel_notice(stderr: str) -> list[str]:
    """A CLI's stderr lines less the C kernel's notice: the lines a test of the CLI's own
    messages expects, with a compiler or without one."""
    return [line for line in stderr.splitlines() if not line.startswith(KERNEL_NOTICE)]


def env_without_kernel() -> dict[str, str]:
    """This process's environment for a child that runs without the C kernel
    (``RISKPPO_NATIVE=0``) and has told the user nothing yet (its notice not marked as shown)."""
    env = {k: v for k, v in os.environ.items() if k != native._NOTICE}
    return {**env, "RISKPPO_NATIVE": "0"}
