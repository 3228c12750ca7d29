#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mpi4py's own test suite as a client of libarcomm_pmpi nobody here wrote.  Takes the
# mpi4py of /usr/bin/python3 (Debian's python3-mpi4py, which tools/setup.sh installs)
# with the test/ of PyPI's source distribution of the same version; where python3 has
# no mpi4py, builds the newest from PyPI's source distribution against the Open MPI on
# PATH in a venv (about 3 minutes on a 2-core VM).  Either is kept outside the
# repository and reused.  Then runs its whole suite (less test_dynproc and test_spawn,
# which need a name server and process spawning: no collective of the library is in
# them) on 1, 2 and 3 processes, once without and once with LD_PRELOAD=libarcomm_pmpi.so.
# Passes when every test that passes without the library passes with it and arcomm
# served calls; prints a table and the library's counts.
# ARCOMM_PMPI_MIN_BYTES=0: arcomm serves every size; PMPI_MIN_BYTES=SIZE passes another
# size, PMPI_MIN_BYTES=default none (the library's defaults: small bcasts and reduces to MPI).
#   tools/mpi4py-tests.sh [LIBARCOMM_PMPI] (default build/runtime/pmpi/libarcomm_pmpi.so)
# Exit 0 passed, 1 failed, 77 skipped (no mpirun/mpicc, no pip or network, no library).
# HEAP=1: the shared heap too (LD_PRELOAD=libarcomm_pmpi.so:libarcomm_heap.so, the heap
# beside libarcomm_pmpi's libarcomm): numpy's and mpi4py's buffers from 64 KiB lie in it.
# ARCOMM_MPI4PY_DIR: where the venv and the unpacked source go
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/arcomm-mpi4py).
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(readlink -f "${1:-build/runtime/pmpi/libarcomm_pmpi.so}" || true)
dir=${ARCOMM_MPI4PY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/arcomm-mpi4py}
skip() { echo "mpi4py-tests: skipped: $*"; exit 77; }

for tool in mpirun mpicc python3; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done
[ -n "$lib" ] && [ -f "$lib" ] || skip "no libarcomm_pmpi.so (${1:-build/runtime/pmpi})"
if [ "${HEAP:-0}" = 1 ]; then
    heap=$(dirname "$lib")/libarcomm_heap.so
    [ -f "$heap" ] || heap=$(dirname "$lib")/../../libarcomm_heap.so
    [ -f "$heap" ] || skip "HEAP=1: no libarcomm_heap.so beside $lib"
    lib="$lib:$(readlink -f "$heap")"
fi

# The sdist carries test/.  fetch VERSION-SPEC: its source unpacked into $dir/src.
fetch() {
    local pip_py=
    for c in python3 /usr/bin/python3; do
        "$c" -m pip --version >/dev/null 2>&1 && { pip_py=$c; break; }
    done
    [ -n "$pip_py" ] || skip "no pip (python3 -m pip)"
    rm -rf "$dir/sdist" "$dir/src"
    "$pip_py" -m pip download -q --no-deps --no-binary :all: "$1" -d "$dir/sdist" \
        >"$dir/download.log" 2>&1 || skip "pip download $1 failed (no network?): $dir/download.log"
    tarball=$(ls "$dir"/sdist/mpi4py-*.tar.gz | head -n 1)
    mkdir -p "$dir/src"
    tar xzf "$tarball" -C "$dir/src" --strip-components=1
}
mkdir -p "$dir"
# Debian's python3 is /usr/bin/python3 (PATH may put another first, e.g. pyenv's).
sys_py=/usr/bin/python3
[ -x "$sys_py" ] || sys_py=$(command -v python3)
system=$("$sys_py" -c 'import mpi4py; print(mpi4py.__version__)' 2>/dev/null || true)
if [ -n "$system" ]; then
    py=$sys_py
    [ "$(cat "$dir/src.version" 2>/dev/null)" = "$system" ] && [ -d "$dir/src/test" ] ||
        fetch "mpi4py==$system"
    echo "$system" >"$dir/src.version"
else
    # No mpi4py in python3: the newest, built in a venv (once).
    py=$dir/venv/bin/python
    if ! { [ -x "$py" ] && "$py" -c 'import mpi4py' 2>/dev/null && [ -d "$dir/src/test" ] &&
        [ "$(cat "$dir/src.version" 2>/dev/null)" = venv ]; }; then
        python3 -m venv "$dir/venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
        fetch mpi4py
        echo "mpi4py-tests: building $(basename "$tarball") (a few minutes)" >&2
        nice -n 10 "$py" -m pip install -q "$tarball" >"$dir/build.log" 2>&1 ||
            skip "pip install mpi4py failed: $dir/build.log"
        echo venv >"$dir/src.version"
    fi
fi
echo "mpi4py-tests: mpi4py $("$py" -c 'import mpi4py; print(mpi4py.__version__)') ($py)," \
    "its test/ from PyPI's source distribution"

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
# One run of the suite: NP, "without" or "with"; rank 0's verbose unittest output is
# left in $runs/<np>-<mode>/1/rank.0/stderr, the library's log in $runs/<np>-<mode>.log.*
run_suite() {
    local np=$1 mode=$2 out=$runs/$1-$2
    local args=(--allow-run-as-root --oversubscribe -np "$np" --output-filename "$out")
    if [ "$mode" = with ]; then
        args+=(-x "LD_PRELOAD=$lib" -x ARCOMM_LOG_LEVEL=info)
        [ "${PMPI_MIN_BYTES:-0}" = default ] ||
            args+=(-x "ARCOMM_PMPI_MIN_BYTES=${PMPI_MIN_BYTES:-0}")
        args+=(
            -x "ARCOMM_LOG_FILE=$out.log.%p"
            -x ARCOMM_TIMEOUT_MS=30000)
    fi
    (cd "$dir/src" && timeout 600 mpirun "${args[@]}" "$py" test/runtests.py --no-builddir \
        -v -e test_dynproc -e test_spawn >/dev/null 2>&1) || true
}

status=0
printf '%-4s %-8s %6s %7s %7s %7s %8s %7s  %s\n' np library ran passed failed skipped served \
    handed "calls served by arcomm (all ranks)"
for np in 1 2 3; do
    for mode in without with; do
        run_suite "$np" "$mode"
    done
    for mode in without with; do
        err=$runs/$np-$mode/1/rank.0/stderr
        touch "$err"
        grep -E '\.\.\. ok$' "$err" | sed 's/ \.\.\. ok$//' | sort -u >"$runs/$np-$mode.passed"
        ran=$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' "$err" | tail -n 1)
        skipped=$(grep -cE '\.\.\. skipped' "$err" || true)
        passed=$(wc -l <"$runs/$np-$mode.passed")
        failed=$(grep -cE '\.\.\. (FAIL|ERROR)$|^(FAIL|ERROR): ' "$err" || true)
        served=- handed=- detail=
        if [ "$mode" = with ]; then
            served=$(cat "$runs/$np-with.log."* 2>/dev/null |
                sed -n 's/.*report: served by arcomm.* total=\([0-9]*\)$/\1/p' |
                awk '{s += $1} END {print s + 0}')
            handed=$(cat "$runs/$np-with.log."* 2>/dev/null |
                sed -n 's/.*report: handed to MPI.* total=\([0-9]*\)$/\1/p' |
                awk '{s += $1} END {print s + 0}')
            detail=$(cat "$runs/$np-with.log."* 2>/dev/null |
                sed -n 's/.*report: served by arcomm \(.*\) total=.*/\1/p' |
                awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); s[kv[1]] += kv[2]}}
                     END {for (k in s) printf "%s=%d ", k, s[k]}')
            [ "${served:-0}" -gt 0 ] || { echo "FAIL: np $np: arcomm served no call"; status=1; }
        fi
        printf '%-4s %-8s %6s %7s %7s %7s %8s %7s  %s\n' "$np" "$mode" "${ran:-0}" "$passed" \
            "$failed" "$skipped" "$served" "$handed" "$detail"
        [ -n "$ran" ] || { echo "FAIL: np $np $mode: the suite did not finish"; status=1; }
    done
    lost=$(comm -23 "$runs/$np-without.passed" "$runs/$np-with.passed")
    if [ -n "$lost" ]; then
        echo "FAIL: np $np: passed without the library, not with it:"
        echo "$lost" | sed 's/^/    /'
        status=1
    fi
done
[ $status -eq 0 ] && echo "mpi4py-tests: passed" || echo "mpi4py-tests: failed"
exit $status
