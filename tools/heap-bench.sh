#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared heap against glibc: every workload of tools/heapbench (a 1 MiB malloc+free
# cycle, numpy temporaries, threads allocating, gcc, sort, fork with 2 GiB live and three
# children reading it, multiprocessing.Pool(4) over a 1.5 GiB array) with and without
# libarcomm_heap.so preloaded, ROUNDS rounds in alternating order; prints a markdown
# table of wall times and peak memory (medians, spread, ratios heap/glibc), the form of
# docs/PERFORMANCE.md's "Shared heap".  Needs numpy for two workloads.
#   BUILD=build ROUNDS=3 ONLY=fork,threads THREADS=2,4,8,16 QUICK=1 tools/heap-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
[ -f "$build/build.ninja" ] || bash tools/setup.sh "$build"
ninja -C "$build" libarcomm_heap.so tools/heapbench/heapbench-cycle \
    tools/heapbench/heapbench-threads tools/heapbench/heapbench-forkread >/dev/null
python3 -c 'import numpy' 2>/dev/null || { echo "heap-bench: numpy missing (pip install numpy)"; exit 1; }
args=(--build "$build" --rounds "${ROUNDS:-3}" --threads "${THREADS:-2,4,8,16}")
[ -n "${ONLY:-}" ] && args+=(--only "$ONLY")
[ -n "${QUICK:-}" ] && args+=(--quick)
exec python3 tools/heapbench/heap_bench.py "${args[@]}"
