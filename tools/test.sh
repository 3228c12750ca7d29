#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sets up, builds and runs every test: a release build with -Werror (all suites, the
# Python package's (tests/python, suite python) among them), an
# ASan+UBSan build (runtime, kernels, tools, Hexagon) and a TSan build (the threaded
# paths: runtime and Hexagon emulation), with lighter sweeps, and a build without the
# Hexagon and CUDA backends (-Dhexagon=disabled -Dcuda=disabled: the library alone, its
# unit and multi suites, and the refusal of a Hexagon communicator); the tree's own checks
# (suite source: the format) in the first only; then mpi4py's test
# suite with and without libarcomm_pmpi (tools/mpi4py-tests.sh).  Ends with one line:
# "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
# The CUDA code for one architecture (sm_90): the default fat build (sm_75 to sm_120) would
# add about ten minutes on two cores; cuda-fatbin-auto still checks the default's flags.
bash tools/setup.sh build-ci --werror -Dgpu_arch=sm_90 || { echo "0 passed, 1 failed"; exit 1; }
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi

status=0
# Each phase's wall time, printed at its end and in a table at the end (CI's whole run must
# stay under 30 minutes on two cores: these say where the time goes).
phases=()
t_phase=0 # SECONDS counts from the start of this script: set-up and build included
phase_end() { # label
    local dt=$((SECONDS - t_phase))
    phases+=("$(printf '%5d s  %s' "$dt" "$1")")
    echo "== $1: ${dt} s"
    t_phase=$SECONDS
}
phase_end "set-up and release build"
run_suite() { # build-dir, label, extra meson test args...
    local dir=$1 label=$2
    shift 2
    echo "== $label"
    meson test -C "$dir" --num-processes 2 --print-errorlogs "$@" || status=1
    phase_end "$label (tests)"
}

run_suite build-ci "release build, every suite"

if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
        -Db_lundef=false -Dcuda=disabled >/dev/null || status=1
fi
ninja -C build-asan >/dev/null || status=1
phase_end "ASan+UBSan build"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
ARCOMM_TEST_QUICK=1 run_suite build-asan "ASan+UBSan build" --suite unit --suite multi --suite async --suite reduce \
    --suite tools --suite arinfo --suite hexagon --no-suite source

if [ ! -f build-tsan/build.ninja ]; then
    meson setup build-tsan --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false \
        -Dcuda=disabled >/dev/null || status=1
fi
ninja -C build-tsan >/dev/null || status=1
phase_end "TSan build"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ARCOMM_TEST_QUICK=1 \
run_suite build-tsan "TSan build" --suite unit --suite multi --suite async --suite hexagon \
    --no-suite source --no-suite streaming

if [ ! -f build-nohex/build.ninja ]; then
    meson setup build-nohex -Dhexagon=disabled -Dcuda=disabled --werror >/dev/null || status=1
fi
ninja -C build-nohex >/dev/null || status=1
phase_end "build without Hexagon or CUDA"
# The library without its GPU and NPU backends: every unit test, the refusal of a Hexagon
# communicator, and the multi-rank tests whose dispatch the missing backends change
# (every collective, the failure paths, arrun); the release build runs the rest of multi.
ARCOMM_TEST_QUICK=1 run_suite build-nohex "build without Hexagon or CUDA" \
    $(meson test -C build-nohex --list --suite unit --no-suite source 2>/dev/null |
      sed -n 's|^arcomm:[^/]*/ ||p') \
    hexagon-absent allreduce failure messages wide collectives arrun_allreduce

# mpi4py's own test suite, without and with libarcomm_pmpi (one check: 77 = skipped, where
# mpirun, pip or the network is missing).
echo "== mpi4py's test suite with libarcomm_pmpi"
mpi4py_rc=0
bash tools/mpi4py-tests.sh build-ci/runtime/pmpi/libarcomm_pmpi.so || mpi4py_rc=$?
phase_end "mpi4py's test suite"
echo "== wall time by phase"
printf '%s\n' "${phases[@]}"

# One plain summary line over the four runs, from meson's own JSON logs, and the mpi4py check.
MPI4PY_RC=$mpi4py_rc python3 - build-ci build-asan build-tsan build-nohex <<'PY'
import json, sys, os
passed = failed = skipped = 0
rc = int(os.environ["MPI4PY_RC"])
if rc == 0:
    passed += 1
elif rc == 77:
    skipped += 1
else:
    failed += 1
for d in sys.argv[1:]:
    path = os.path.join(d, "meson-logs", "testlog.json")
    if not os.path.exists(path):
        failed += 1
        continue
    for line in open(path):
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
summary=$?
[ $status -eq 0 ] && exit $summary || exit 1
