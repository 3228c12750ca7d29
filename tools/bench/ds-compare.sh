#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# arcomm's process ranks against DeepSpeed's CPU shared-memory allreduce
# (deepspeed.comm.inference_all_reduce), side by side: 2 ranks, each on its own core,
# f32 sum, 4 B to 64 MiB in x4 steps, in place and out of place, ROUNDS rounds
# (default 3) with the two interleaved (DeepSpeed, arcomm, DeepSpeed, arcomm ...; the
# order flips every other round).  Each run's output and JSON go to OUT (default
# build/ds-compare); at the end tools/bench/ds_summary.py prints the tables
# (ratio = DeepSpeed time / arcomm time), over all rounds and split by the VM's fast
# and slow states (ds_summary.py says how it tells them apart); it also takes
# several OUT folders, to pool the rounds of several sittings.  For every run, OUT/load.txt gets `uptime`
# and the CPU idle share over one second (vmstat) just before it, and after it the
# CPU time that other processes took while it ran (all busy time in /proc/stat less
# the run's own user + sys time), as a share of the cores: a second load on the
# cores skews either side (the load average counts this script's own ranks too).
#
# DS_VENV=DIR names a Python venv with torch and DeepSpeed (required).  The one
# measured in docs/PERFORMANCE.md ("against DeepSpeed") (Python 3.11.7, Debian 12, x86-64):
#   python3 -m venv /work/venv-ds
#   /work/venv-ds/bin/pip install --upgrade pip
#   /work/venv-ds/bin/pip install torch==2.15.0 numpy ninja py-cpuinfo psutil packaging wheel
#   DS_ACCELERATOR=cpu /work/venv-ds/bin/pip install --no-build-isolation deepspeed==0.19.8
# PyPI's Linux torch wheel is a CUDA build and brings the nvidia-* CUDA wheels
# (about 5.4 GB for the whole venv); torch runs on the CPU without a GPU.  DeepSpeed
# JIT-builds its shm op (deepspeed_shm_comm_op, with ninja and g++, into
# ~/.cache/torch_extensions) on the first run; oneCCL is not needed: with the gloo
# backend and LOCAL_SIZE = world size, TorchBackend loads the op and
# inference_all_reduce calls it.
#
# BUILD=DIR uses another arcomm build tree than build/ (built here when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${DS_VENV:?DS_VENV must name the venv with torch and deepspeed (see the top of this script)}"
py="$DS_VENV/bin/python"
build=${BUILD:-build}
out=${OUT:-build/ds-compare}
rounds=${ROUNDS:-3}
export DS_ACCELERATOR=cpu

if [[ ! -x "$build/tools/arbench/arbench" ]]; then
    meson setup "$build" --buildtype=release -Dcuda=disabled -Dtests=false
    nice -n 19 ninja -C "$build" -j1
fi
arbench="$build/tools/arbench/arbench"
mkdir -p "$out"
: >"$out/load.txt"

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
    echo "python: $("$py" -c 'import sys; print(sys.version.split()[0])')"
    echo "torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "deepspeed: $("$py" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -1)"
    echo "arcomm: $("$arbench" --version | head -1)"
    echo "rounds: $rounds"
} | tee "$out/env.txt"

snap() { # the load just before a run
    { uptime; vmstat 1 2 | awk 'END { print "  cpu idle over 1 s before the run: " $15 "%" }'; } >>"$out/load.txt"
}
busy() { # busy jiffies of all cpus so far: not niced (user system irq softirq steal), niced
    awk '/^cpu / { print $2 + $4 + $7 + $8 + $9, $3; exit }' /proc/stat
}
timed() { # command...: run it, then log the share of the cores others took meanwhile
    local b0 b1 tf
    tf=$(mktemp)
    b0=$(busy)
    local rc=0
    /usr/bin/time -f '%e %U %S' -o "$tf" "$@" || rc=$?
    b1=$(busy)
    # nice does not shield the run from niced work in another session when the
    # kernel groups tasks by session (sched_autogroup), so both count as others
    awk -v b0="$b0" -v b1="$b1" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" '{
        split(b0, x, " "); split(b1, y, " ")
        other = (y[1] - x[1]) / hz - $2 - $3; if (other < 0) other = 0
        niced = (y[2] - x[2]) / hz
        printf "  wall %.1f s, own cpu %.1f s, others %.1f s + niced %.1f s (%.0f%% of %d cores)\n",
            $1, $2 + $3, other, niced, 100 * (other + niced) / ($1 * n), n }' "$tf" >>"$out/load.txt"
    rm -f "$tf"
    return "$rc"
}
ds() { # mode round
    local flag=()
    [[ $1 == outplace ]] && flag=(--outplace)
    echo "== round $2: DeepSpeed $1" | tee -a "$out/load.txt"
    snap
    timed "$py" tools/bench/ds_allreduce.py -n 2 -b 4 -e 64M -f 4 "${flag[@]}" \
        --json "$out/ds-$1-$2.json" >"$out/ds-$1-$2.txt" 2>&1 ||
        { cat "$out/ds-$1-$2.txt"; return 1; }
    grep -v '^W[0-9]' "$out/ds-$1-$2.txt" | grep -v 'built successfully' || true
}
ar() { # mode round
    local flag=()
    [[ $1 == inplace ]] && flag=(--inplace)
    echo "== round $2: arcomm $1" | tee -a "$out/load.txt"
    snap
    timed "$arbench" -n 2 --procs -b 4 -e 64M -f 4 --check "${flag[@]}" \
        --json "$out/ar-$1-$2.json" | tee "$out/ar-$1-$2.txt"
}

for ((r = 1; r <= rounds; r++)); do
    for mode in inplace outplace; do
        if ((r % 2)); then
            ds "$mode" "$r"
            ar "$mode" "$r"
        else
            ar "$mode" "$r"
            ds "$mode" "$r"
        fi
    done
done
snap

echo
{
    echo "## All rounds, paired"
    echo
    python3 tools/bench/ds_summary.py "$out"
    echo "## By the VM's state (runs pooled)"
    echo
    python3 tools/bench/ds_summary.py --by-state "$out"
} | tee "$out/summary.md"
