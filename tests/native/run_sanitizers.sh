#!/usr/bin/env bash
# Run the C kernels' tests (riskppo/nn/native/*.c: every source is built into the one library)
# against an AddressSanitizer + UBSan build.
#
# Usage (from anywhere):  tests/native/run_sanitizers.sh [extra pytest arguments]
#   PYTHON   the interpreter with riskppo's dependencies (default: python)
#   CC       the compiler (default: gcc; clang works too where it ships libclang_rt.asan)
#
# How: the loader (riskppo/nn/native/__init__.py) appends $RISKPPO_NATIVE_CFLAGS to its flags and
# builds into $RISKPPO_CACHE; both point at this run only (a temporary directory, removed on
# exit), so the instrumented library never enters the normal cache. CPython is not instrumented,
# so the ASan runtime must be the first library loaded: it is LD_PRELOADed, followed by libstdc++
# (else ASan cannot find the real __cxa_throw when a C++ extension, e.g. matplotlib's, throws
# and aborts with "CHECK failed: ... real___cxa_throw"). Leak detection is off
# (CPython keeps its allocations until exit by design); any other report aborts the process, so
# the run fails. pytest captures Python's output only (--capture=sys), so that the reports, which
# the runtimes write to file descriptor 2, reach the log; they are counted and shown at the end.
#
# Exit status: 0 when every test passed and no sanitizer reported anything; 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
PYTHON=${PYTHON:-python}
CC=${CC:-gcc}
asan=$("$CC" -print-file-name=libasan.so)
if [[ ! -e "$asan" ]]; then
    echo "no libasan.so for $CC ($asan): install the compiler's sanitizer runtime" >&2
    exit 1
fi
preload="$asan $("$CC" -print-file-name=libstdc++.so.6)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/pytest.log"

export CC
export RISKPPO_CACHE="$work/cache"
export RISKPPO_NATIVE_CFLAGS="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONUNBUFFERED=1  # pytest's progress up to a crash stays in the log
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The library the tests will load must be the instrumented one (not a fallback to PyTorch).
LD_PRELOAD="$preload" "$PYTHON" - <<'PY' || exit 1
import os
import subprocess
from riskppo.nn import native
lib = native.kernel()
assert lib is not None, f"the sanitizer build failed: {native.unavailable_reason()}"
path = os.path.realpath(lib._name)  # the loader opens the verified file as /proc/self/fd/N
syms = subprocess.run(["nm", "-D", path], capture_output=True, text=True).stdout
assert "__asan_" in syms and "__ubsan_" in syms, f"{path} is not instrumented"
print(f"instrumented build: {path}")
PY

tests=(tests/unit/nn/test_native_lstm.py tests/unit/nn/test_actor_step.py tests/unit/nn/test_actor_step_gauss.py
       tests/unit/algo/test_fused_step.py
       tests/unit/nn/test_c_boundary.py)
LD_PRELOAD="$preload" "$PYTHON" -m pytest -n 0 -rfE --capture=sys -p no:cacheprovider "${tests[@]}" "$@" \
    2>&1 | tee "$log"
status=${PIPESTATUS[0]}

pattern="ERROR: AddressSanitizer|AddressSanitizer: CHECK failed|runtime error:"
reports=$(grep -cE "$pattern" "$log")
echo "---- sanitizer summary ----"
# each report's first line, its first two stack frames and ASan's summary line
grep -E "$pattern|^    #[01] |^SUMMARY: " "$log" | head -n 40
grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$log" | tail -n 20
echo "sanitizer reports: $reports (AddressSanitizer errors and UBSan runtime errors)"
echo "pytest exit status: $status"
[[ $status -eq 0 && $reports -eq 0 ]]
