#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: set up, build, and run the 2-rank host allreduce benchmark against
# Open MPI (f32 sum, 4 B to 64 MiB, results checked), thread ranks, then process ranks,
# then process ranks with the shared heap (arrun --shared-heap: their malloc'd buffers
# reachable by the other ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh build
echo "== arbench: 2 thread ranks vs Open MPI (2 processes)"
./build/tools/arbench/arbench -n 2 -b 4 -e 64M --compare mpi --check "$@"
echo "== arbench: 2 process ranks (arrun) vs Open MPI (2 processes)"
./build/tools/arbench/arbench -n 2 --procs -b 4 -e 64M --compare mpi --check "$@"
echo "== arbench: 2 process ranks (arrun --shared-heap) vs Open MPI (2 processes)"
./build/tools/arbench/arbench -n 2 --procs --shared-heap -b 4 -e 64M --compare mpi --check "$@"
