#!/usr/bin/env bash
# Run the C kernel's tests (riskppo/nn/native/lstm.c) against an AddressSanitizer + UBSan build.
#
# Usage (from anywhere):  tests/native/run_sanitizers.sh [extra pytest arguments]
#   PYTHON   the interpreter with riskppo's dependencies (default: python)
#   CC       the compiler (default: gcc; clang works too where it ships libclang_rt.asan)
#
# How: the loader (riskppo/nn/native/__init__.py) appends $RISKPPO_NATIVE_CFLAGS to its flags and
# builds into $RISKPPO_CACHE; both point at this run only (a temporary directory, removed on
# exit), so the instrumented library never enters the normal cache. CPython is not instrumented,
# so the ASan runtime must be the first library loaded: it is LD_PRELOADed. Leak detection is off
# (CPython keeps its allocations until exit by design); any other report aborts the process, so
# the run fails. Reports are written to files (pytest's output capture would swallow a report
# from a process that aborts) and printed and counted at the end.
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/pytest.log"

export CC
export RISKPPO_CACHE="$work/cache"
export RISKPPO_NATIVE_CFLAGS="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$work/report"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$work/report"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The library the tests will load must be the instrumented one (not a fallback to PyTorch).
LD_PRELOAD="$asan" "$PYTHON" - <<'PY' || exit 1
import ctypes, subprocess
from riskppo.nn import native
lib = native.kernel()
assert lib is not None, f"the sanitizer build failed: {native.unavailable_reason()}"
syms = subprocess.run(["nm", "-D", lib._name], capture_output=True, text=True).stdout
assert "__asan_" in syms and "__ubsan_" in syms, f"{lib._name} is not instrumented"
print(f"instrumented build: {lib._name}")
PY

tests=(tests/unit/test_native_lstm.py tests/unit/test_actor_step.py tests/unit/test_fused_step.py
       tests/unit/test_c_boundary.py)
LD_PRELOAD="$asan" "$PYTHON" -m pytest -rfE -p no:cacheprovider "${tests[@]}" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

shopt -s nullglob
files=("$work"/report.*)
echo "---- sanitizer summary ----"
for f in "${files[@]}"; do
    echo "== $f"
    grep -vE "^    #([2-9]|[1-9][0-9]+) " "$f" | head -n 30  # the report, its first stack frames
done
grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$log" | tail -n 20
reports=${#files[@]}
echo "sanitizer reports: $reports (AddressSanitizer and UBSan)"
echo "pytest exit status: $status"
[[ $status -eq 0 && $reports -eq 0 ]]
