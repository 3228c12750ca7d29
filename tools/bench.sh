#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: set up, build, and run the 2-rank host allreduce benchmark against
# Open MPI (f32 sum, 4 B to 64 MiB, results checked), thread ranks, then process ranks,
# then process ranks with the shared heap (arrun --shared-heap: their malloc'd buffers
# reachable by the other ranks).
#
# REPORT=1: the three sweeps RUNS times (3 by default), each run's arbench --json kept
# in build/bench-report/, then tools/perf-report/perf_report.py writes the tables
# "threads", "procs" and "heap" of docs/PERFORMANCE.md and the README's table from
# them (git diff shows the new numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh build -Dgpu_arch=sm_90   # the host benchmark: one GPU architecture is enough where nvcc exists
runs=1 json=()
if [ "${REPORT:-0}" = 1 ]; then
    runs=${RUNS:-3}
    out=build/bench-report
    rm -rf "$out"
    mkdir -p "$out"
fi
for ((i = 1; i <= runs; i++)); do
    [ "${REPORT:-0}" = 1 ] && echo "== run $i of $runs" && json=(--json "$out/threads-$i.json")
    echo "== arbench: 2 thread ranks vs Open MPI (2 processes)"
    ./build/tools/arbench/arbench -n 2 -b 4 -e 64M --compare mpi --check "${json[@]}" "$@"
    [ "${REPORT:-0}" = 1 ] && json=(--json "$out/procs-$i.json")
    echo "== arbench: 2 process ranks (arrun) vs Open MPI (2 processes)"
    ./build/tools/arbench/arbench -n 2 --procs -b 4 -e 64M --compare mpi --check "${json[@]}" "$@"
    [ "${REPORT:-0}" = 1 ] && json=(--json "$out/heap-$i.json")
    echo "== arbench: 2 process ranks (arrun --shared-heap) vs Open MPI (2 processes)"
    ./build/tools/arbench/arbench -n 2 --procs --shared-heap -b 4 -e 64M --compare mpi --check \
        "${json[@]}" "$@"
done
if [ "${REPORT:-0}" = 1 ]; then
    python3 tools/perf-report/perf_report.py \
        --run threads "$out"/threads-*.json --run procs "$out"/procs-*.json \
        --run heap "$out"/heap-*.json --write docs/PERFORMANCE.md --write README.md
fi
