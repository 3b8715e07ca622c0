"""Skip marks for the tests that need a compiler, each with the reason it is missing.

- :func:`needs_c_compiler`: the C compiler that :mod:`riskppo.nn.native` builds its kernel with
  (``$CC``, else ``cc``, ``gcc`` or ``clang`` on ``PATH``) — for the tests of that loader, which
  build into caches of their own.
- :func:`needs_c_kernel`: the loaded C kernel itself (no compiler, ``RISKPPO_NATIVE=0``, a
  refused cache: the loader's logged reason).
- :func:`needs_cxx_compiler`: the C++ compiler ``torch.compile``'s CPU backend (inductor) builds
  its kernels with (``$CXX``, else ``g++``).
"""

from __future__ import annotations

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
