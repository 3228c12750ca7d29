#!/bin/bash
# SPDX-License-Identifier: MIT
# The whole GPU run of the CUDA transport, on the lent GPU machine, in one call:
# unpack the deps, build with CUDA, run the CUDA tests, benchmark arcomm against NCCL
# (default, and NCCL_P2P_DISABLE=1: NCCL through host memory), logs under $OUT.
#
#   eval "$(bash .deps/unpack.sh)"; bash tools/gpu-check.sh [full|quick|tests|core|arcomm|graph|movement|p2p|mpi|build]
#
# Mode p2p (also part of tests and full): the peer-to-peer transport, forced
# (ARCOMM_TRANSPORT=cuda-p2p; not yet verified on two GPUs, so auto never picks it): the
# transport choice (test_cuda_select), test_cuda, test_cuda_coll and test_cuda_graph on
# cuda-p2p (process ranks on one GPU where one is lent), then arbench cuda-p2p against the
# host-staged cuda, eager and in graphs (under a private MPS daemon where one GPU is
# lent), logs in $OUT/p2p.log and $OUT/p2p-bench.log.
# P2P_LIMIT bounds each test (default 300 s), P2P_TESTS=0 skips the tests, P2P_BENCH=0
# skips arbench.
#
# TEST_LIMIT (seconds, default 300) bounds test_cuda; DIAG=0 skips diag_staging and
# diag_pcie (the copy engines' ceilings: one GPU, all GPUs, both directions at once);
# NCCL_NVLINK=0 skips NCCL over NVLink (only NCCL through host memory is compared);
# OFF_MIN: smallest size of the bf16-off run; ARBENCH=0 skips arbench, ARB_LIMIT bounds it.
# Mode mpi (also part of tests and full): CUDA buffers through comm_init_mpi
# (tests/mpi/test_mpi_cuda under mpirun: process ranks sharing the GPUs; MPI_LIMIT
# bounds each run), built where Open MPI is found (-Dmpi=auto).
# SANITIZE=1 also runs the failure and process-rank tests under compute-sanitizer memcheck.
#
# Never touches the GPUs' settings.  NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export PATH=/usr/local/cuda/bin:$PATH
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
[ -d "$NCCL_LIB" ] && export LD_LIBRARY_PATH=$NCCL_LIB:${LD_LIBRARY_PATH:-}
# unpack.sh's pkg-config files name -lcmocka without -L: let the linker find them.
export LIBRARY_PATH=${LD_LIBRARY_PATH:-}:${LIBRARY_PATH:-}
mode=${1:-full}
B=${BUILD:-/tmp/build-cuda}
rc=0

{
  date -u
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv
  nvidia-smi topo -m
} > "$OUT/machine.txt" 2>&1

echo "== build" | tee "$OUT/build.log"
# A build directory left by an earlier call of a warm machine is reused (ninja rebuilds
# what changed); a cold machine configures afresh.
if [ -f "$B/build.ninja" ] && ninja -C "$B" >>"$OUT/build.log" 2>&1; then
  echo "reused $B" >>"$OUT/build.log"
elif ! { meson setup "$B" -Dcuda=enabled -Dgpu_arch=sm_90 --werror -Dmpi=auto --wipe \
         >>"$OUT/build.log" 2>&1 || meson setup "$B" -Dcuda=enabled -Dgpu_arch=sm_90 --werror \
         -Dmpi=auto >>"$OUT/build.log" 2>&1; } || \
   ! ninja -C "$B" >>"$OUT/build.log" 2>&1; then
  # The other teams' targets may be mid-change: build what the CUDA run needs.
  echo "full build failed; building the CUDA targets only" | tee -a "$OUT/build.log"
  # test_mpi_cuda exists only where meson found MPI (ninja refuses unknown targets).
  mpi_target=
  ninja -C "$B" -t targets all 2>/dev/null | grep '^tests/mpi/test_mpi_cuda:' >/dev/null &&
    mpi_target=tests/mpi/test_mpi_cuda
  ninja -C "$B" -k 0 tests/cuda/test_cuda tests/cuda/test_cuda_coll tests/cuda/test_cuda_layout \
    tests/cuda/bench_cuda tests/cuda/test_cuda_graph tests/cuda/test_cuda_select tools/arbench/arbench \
    tests/cuda/diag_staging tests/cuda/diag_pcie $mpi_target \
    >>"$OUT/build.log" 2>&1
  [ -x "$B/tests/cuda/test_cuda" ] && [ -x "$B/tests/cuda/bench_cuda" ] || {
    grep -B2 -A12 FAILED "$OUT/build.log" | head -60; exit 1; }
fi
tail -3 "$OUT/build.log"

# What arcomm sees here: the GPUs, their NUMA node and PCI bus id, the peer matrix.
if [ -x "$B/tools/arinfo/arinfo" ]; then
  "$B/tools/arinfo/arinfo" > "$OUT/arinfo.txt" 2>&1
  "$B/tools/arinfo/arinfo" --json > "$OUT/arinfo.json" 2>&1
  "$B/tools/arinfo/arinfo" --only cuda 2>&1 | tee -a "$OUT/machine.txt"
fi
# Mode build: the build and what arinfo sees, nothing run (tools/gpu-two.sh starts so).
[ "$mode" = build ] && exit $rc

if [ "${DIAG:-1}" != 0 ]; then
  echo "== staging memory" | tee "$OUT/diag.log"
  "$B/tests/cuda/diag_staging" 2>&1 | tee -a "$OUT/diag.log"
  echo "== PCIe ceilings" | tee -a "$OUT/diag.log"
  timeout 60 "$B/tests/cuda/diag_pcie" 64 2>&1 | tee -a "$OUT/diag.log"
fi

# CUDA graphs: capture and replay with process ranks, and with thread ranks a GPU each
# where two GPUs are lent (tests/cuda/test_cuda_graph), and
# arbench's kernel-path latency, eager against graph replays, in one run (mode graph:
# only this, after the build).
# mps_start/mps_stop and ngpus (tools/gpu-mps.sh).
. "$(dirname "$0")/gpu-mps.sh"

graph_check() {
  echo "== graphs" | tee "$OUT/graph.log"
  timeout "${GRAPH_LIMIT:-240}" "$B/tests/cuda/test_cuda_graph" >>"$OUT/graph.log" 2>&1
  grc=$?
  grep -E "^(ok|FAIL|PASS|SKIP)" "$OUT/graph.log"
  grep -B1 -A4 "FAIL" "$OUT/graph.log" | head -40
  echo "test_cuda_graph exit status $grc" | tee -a "$OUT/graph.log"
  [ $grc = 0 ] || rc=1
  AB="$B/tools/arbench/arbench"
  [ -x "$AB" ] && [ "${GRAPH_BENCH:-1}" != 0 ] || return
  # The latency runs under a private MPS daemon where one GPU is lent (two process
  # ranks on it otherwise time-slice: 2.69 ms a call, eager or graph, seen 2026-12-02);
  # MPS=0 or MPS=1 decides instead.
  [ "${MPS:-$([ "$ngpus" = 1 ] && echo 1 || echo 0)}" != 0 ] && mps_start "$OUT/graph.log"
  for round in 1 2; do
    for n in 2 1; do
      for g in "" --graph; do
        echo "### arbench --procs --device cuda -n $n -b 8 -e 64K -f 4 --check $g (round $round, MPS $mps)" \
          | tee -a "$OUT/graph.log"
        timeout 120 "$AB" --procs --device cuda -n $n -b 8 -e 64K -f 4 --check $g 2>&1 \
          | tee -a "$OUT/graph.log" | grep -vE "^# (floor|ceil)" | tail -8
      done
    done
  done
  mps_stop
}
if [ "$mode" = graph ]; then
  graph_check
  exit $rc
fi

# Mode movement: the copy-engine path's collectives with process ranks under a private
# MPS daemon (without it two processes on one GPU time-slice, ~2.7 ms a call): arbench
# of every collective, 1 KiB - 16 MiB, every element checked, logs in $OUT/movement.log.
# On 2026-12-01 (one H200, before the copy-out kernel) allgather took 201 us and
# broadcast 156 us at 4 MiB.
if [ "$mode" = movement ]; then
  AB="$B/tools/arbench/arbench"
  : > "$OUT/movement.log"
  mps_start "$OUT/movement.log"
  for coll in allgather broadcast alltoall reduce_scatter allreduce; do
    echo "### arbench --device cuda --procs -n 2 --coll $coll -b 1K -e 16M -f 8 --check" \
      | tee -a "$OUT/movement.log"
    timeout "${ARB_LIMIT:-60}" "$AB" --device cuda --procs -n 2 --coll $coll -b 1K -e 16M -f 8 \
      --check 2>&1 | tee -a "$OUT/movement.log" | grep -E "^ +[0-9]|rror"
    m=${PIPESTATUS[0]}
    echo "arbench $coll exit status $m" | tee -a "$OUT/movement.log"
    [ "$m" = 0 ] || rc=1
  done
  mps_stop
  exit $rc
fi

# The peer-to-peer transport, forced (every test on one GPU uses process ranks).
p2p_check() {
  echo "== cuda-p2p" | tee "$OUT/p2p.log"
  local t prc
  if [ "${P2P_TESTS:-1}" = 0 ]; then
    echo "tests skipped (P2P_TESTS=0)" | tee -a "$OUT/p2p.log"
  elif [ -x "$B/tests/cuda/test_cuda_select" ]; then
    timeout "${P2P_LIMIT:-300}" "$B/tests/cuda/test_cuda_select" >>"$OUT/p2p.log" 2>&1
    prc=$?
    echo "test_cuda_select exit status $prc" | tee -a "$OUT/p2p.log"
    [ $prc = 0 ] || rc=1
  fi
  for t in test_cuda test_cuda_coll test_cuda_graph; do
    [ "${P2P_TESTS:-1}" = 0 ] && break
    echo "### ARCOMM_TRANSPORT=cuda-p2p $t" >>"$OUT/p2p.log"
    ARCOMM_TRANSPORT=cuda-p2p timeout "${P2P_LIMIT:-300}" "$B/tests/cuda/$t" >>"$OUT/p2p.log" 2>&1
    prc=$?
    echo "$t on cuda-p2p exit status $prc" | tee -a "$OUT/p2p.log"
    [ $prc = 0 ] || rc=1
  done
  grep -E "^(ok|FAIL|PASS|SKIP)|transport" "$OUT/p2p.log" | head -60
  grep -B1 -A4 "FAIL" "$OUT/p2p.log" | head -40
  AB="$B/tools/arbench/arbench"
  [ -x "$AB" ] && [ "${P2P_BENCH:-1}" != 0 ] || return
  echo "== cuda-p2p arbench" | tee "$OUT/p2p-bench.log"
  # Two process ranks on one GPU: under MPS, or every call costs a time slice.
  [ "$ngpus" = 1 ] && mps_start "$OUT/p2p-bench.log"
  local tr g
  for tr in cuda-p2p cuda; do
    for g in "" --graph; do
      echo "### arbench --device cuda --transport $tr --procs -n 2 -b 8 -e 128M -f 4 --check $g" \
        | tee -a "$OUT/p2p-bench.log"
      timeout "${ARB_LIMIT:-150}" "$AB" --device cuda --transport $tr --procs -n 2 -b 8 -e 128M \
        -f 4 --check $g 2>&1 | tee -a "$OUT/p2p-bench.log" | grep -vE "^# (floor|ceil)" | tail -30
      local arc=${PIPESTATUS[0]}
      echo "arbench ($tr$g) exit status $arc" | tee -a "$OUT/p2p-bench.log"
      [ "$arc" = 0 ] || rc=1
    done
  done
  # Every collective on cuda-p2p (broadcast, allgather and alltoall as direct copies).
  echo "### arbench --device cuda --transport cuda-p2p --procs -n 2 --coll all -b 8 -e 16M -f 16 --check" \
    | tee -a "$OUT/p2p-bench.log"
  timeout "${ARB_LIMIT:-150}" "$AB" --device cuda --transport cuda-p2p --procs -n 2 --coll all \
    -b 8 -e 16M -f 16 --check 2>&1 | tee -a "$OUT/p2p-bench.log" | grep -E "^# coll|^ +[0-9]|rror"
  arc=${PIPESTATUS[0]}
  echo "arbench (cuda-p2p, every collective) exit status $arc" | tee -a "$OUT/p2p-bench.log"
  [ "$arc" = 0 ] || rc=1
  mps_stop
}
if [ "$mode" = p2p ]; then
  p2p_check
  exit $rc
fi
# CUDA buffers through comm_init_mpi: every collective on device buffers, the failure
# cases, with 1 rank a host (2 hosts), 2 ranks on one host, 2 hosts of 2, hosts of 2
# and 1; Open MPI as root in a container needs --allow-run-as-root, and more ranks
# than cores --oversubscribe.
mpi_check() {
  echo "== mpi (CUDA buffers through comm_init_mpi)" | tee "$OUT/mpi.log"
  local T="$B/tests/mpi/test_mpi_cuda"
  if [ ! -x "$T" ] || ! command -v mpirun >/dev/null; then
    echo "SKIP: test_mpi_cuda not built (meson found no MPI: no mpi.h/mpicc; see build.log's" \
      "'Run-time dependency mpi') or no mpirun" | tee -a "$OUT/mpi.log"
    grep -i "dependency mpi" "$OUT/build.log" | head -2
    [ "$mode" = mpi ] && rc=1 # asked for: not a silent pass
    return
  fi
  local np rph m
  for c in 2:1 2:2 3:3 4:2 3:2; do
    np=${c%:*} rph=${c#*:}
    echo "### test_mpi_cuda: mpirun -np $np, ARCOMM_MPI_RANKS_PER_HOST=$rph" | tee -a "$OUT/mpi.log"
    ARCOMM_LOG_LEVEL=none ARCOMM_MPI_RANKS_PER_HOST=$rph \
      OMPI_MCA_btl_vader_single_copy_mechanism=none timeout "${MPI_LIMIT:-300}" \
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$T" \
      >"$OUT/mpi-np$np-rph$rph.log" 2>&1
    m=$?
    cat "$OUT/mpi-np$np-rph$rph.log" >>"$OUT/mpi.log"
    grep -E "^(# |ok|FAIL)|^rank [0-9]+:" "$OUT/mpi-np$np-rph$rph.log" | head -24
    echo "test_mpi_cuda np $np rph $rph exit status $m" | tee -a "$OUT/mpi.log"
    [ $m = 0 ] || rc=1
  done
  # Two emulated hosts (namespaces, TCP between them; tests/mpi/two_hosts.sh), 2 ranks
  # each: exit 77 where namespaces cannot be made here (skipped, not a failure).
  echo "### test_mpi_cuda: two emulated hosts x 2 ranks" | tee -a "$OUT/mpi.log"
  ARCOMM_LOG_LEVEL=none OMPI_MCA_btl_vader_single_copy_mechanism=none \
    timeout "${MPI_LIMIT:-300}" bash tests/mpi/two_hosts.sh 2 "$T" >"$OUT/mpi-2hosts.log" 2>&1
  m=$?
  cat "$OUT/mpi-2hosts.log" >>"$OUT/mpi.log"
  grep -E "^(# |ok|FAIL|skipped)|^rank [0-9]+:|left behind" "$OUT/mpi-2hosts.log" | head -24
  echo "test_mpi_cuda two hosts x 2 exit status $m (77: skipped)" | tee -a "$OUT/mpi.log"
  [ $m = 0 ] || [ $m = 77 ] || rc=1
}
if [ "$mode" = mpi ]; then
  mpi_check
  exit $rc
fi

echo "== tests" | tee "$OUT/tests.log"
# Mode core: test_cuda, test_cuda_coll and the graph test (no arbench), then stop.
[ "$mode" = core ] && GRAPH_BENCH=0
"$B/tests/cuda/test_cuda_layout" >>"$OUT/tests.log" 2>&1 || rc=1
timeout "${TEST_LIMIT:-300}" "$B/tests/cuda/test_cuda" >>"$OUT/tests.log" 2>&1
trc=$?
grep -E "^(ok|FAIL|PASS|SKIP|     )" "$OUT/tests.log" | head -40
grep -A2 "^FAIL" "$OUT/tests.log" | head -30
echo "test_cuda exit status $trc"
[ $trc = 0 ] || rc=1
# Every collective, dtype and op on CUDA (process ranks when one GPU is lent).
timeout "${COLL_LIMIT:-300}" "$B/tests/cuda/test_cuda_coll" >"$OUT/coll.log" 2>&1
crc=$?
grep -E "^(ok|FAIL|PASS|SKIP)" "$OUT/coll.log" | tail -20
grep -B2 -A6 "FAIL" "$OUT/coll.log" | head -60
echo "test_cuda_coll exit status $crc" | tee -a "$OUT/tests.log"
[ $crc = 0 ] || rc=1
graph_check
[ "$mode" = core ] && exit $rc
p2p_check
mpi_check

if [ "${SANITIZE:-0}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (failure paths, process ranks)" | tee "$OUT/sanitize.log"
  ARCOMM_TEST_ONLY=fail,proc timeout "${SAN_LIMIT:-240}" compute-sanitizer --tool memcheck \
    --target-processes all --error-exitcode 9 "$B/tests/cuda/test_cuda" >>"$OUT/sanitize.log" 2>&1
  src=$?
  grep -E "^(ok|FAIL|PASS)|ERROR SUMMARY|Invalid" "$OUT/sanitize.log" | head -30
  echo "compute-sanitizer exit status $src"
  [ $src = 0 ] || rc=1
  ARCOMM_TEST_REPLAYS=5 timeout "${SAN_LIMIT:-240}" compute-sanitizer --tool memcheck \
    --target-processes all --error-exitcode 9 "$B/tests/cuda/test_cuda_graph" \
    >>"$OUT/sanitize-graph.log" 2>&1
  src=$?
  grep -E "^(ok|FAIL|PASS)|ERROR SUMMARY|Invalid" "$OUT/sanitize-graph.log" | head -20
  echo "compute-sanitizer (graphs) exit status $src"
  [ $src = 0 ] || rc=1
fi

[ "$mode" = tests ] && exit $rc
echo "== bench" | tee "$OUT/bench.log"
BENCH="$B/tests/cuda/bench_cuda"
run() { echo "### $*" >>"$OUT/bench.log"; "$@" 2>&1 | tee -a "$OUT/bench.log"; }
e=$((128 << 20))
[ "$mode" = quick ] && e=$((8 << 20))
run "$BENCH" --lib arcomm -b 8 -e $e
ARCOMM_BF16_THRESHOLD=off run "$BENCH" --lib arcomm -b "${OFF_MIN:-8}" -e $e
if [ "$mode" != arcomm ]; then
  [ "${NCCL_NVLINK:-1}" != 0 ] && run "$BENCH" --lib nccl -b 8 -e $e
  NCCL_P2P_DISABLE=1 run "$BENCH" --lib nccl -b 8 -e $e
fi
# The lead's arbench, arcomm against NCCL in one run (default, then NCCL through host
# memory), with every element checked.
AB="$B/tools/arbench/arbench"
if [ -x "$AB" ] && [ "$mode" != arcomm ] && [ "${ARBENCH:-1}" != 0 ]; then
  echo "== arbench" | tee "$OUT/arbench.log"
  for p2p in off default; do
    echo "### arbench --device cuda -n 2 -b 8 -e 128M -f 4 --check --compare nccl (NCCL P2P $p2p)" \
      | tee -a "$OUT/arbench.log"
    if [ $p2p = off ]; then
      NCCL_P2P_DISABLE=1 timeout "${ARB_LIMIT:-150}" "$AB" --device cuda -n 2 -b 8 -e 128M -f 4 --check \
        --compare nccl 2>&1 | tee -a "$OUT/arbench.log"
    else
      timeout "${ARB_LIMIT:-150}" "$AB" --device cuda -n 2 -b 8 -e 128M -f 4 --check --compare nccl 2>&1 \
        | tee -a "$OUT/arbench.log"
    fi
    echo "arbench exit status ${PIPESTATUS[0]}" | tee -a "$OUT/arbench.log"
  done
fi
echo "== summary"
grep -E "^(ok|FAIL|PASS)" "$OUT/tests.log" | head -30
echo "test_cuda exit status $trc"
exit $rc
