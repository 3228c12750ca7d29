#!/bin/bash
# SPDX-License-Identifier: MIT
# The two-GPU run (nvidia-h200-x2), in as few device calls as the 600 s limit allows:
# every phase one call, logs under $OUT, a summary on stdout.
#
#   eval "$(bash .deps/unpack.sh)"; bash tools/gpu-two.sh tests|bench|clients
#
#   tests    the CUDA suites (tools/gpu-check.sh tests, benchmarks off): test_cuda,
#            test_cuda_coll and test_cuda_graph with two thread ranks (a GPU each) and
#            with process ranks, on the host-staged transport and forced on cuda-p2p
#            (with test_cuda_select: peer access forced off), test_mpi_cuda under mpirun
#   bench    arbench --device cuda -n 2 --coll all -b 8 -e 128M -f 4 --check --compare
#            nccl for --transport cuda and cuda-p2p, eager and --graph, against NCCL by
#            default (NVLink) and with NCCL_P2P_DISABLE=1 (through host memory): eight
#            sweeps, then per collective and sweep NCCL time / arcomm time, lowest and
#            highest and at 8 B, 32 KiB, 2 MiB and 128 MiB
#   clients  tools/gpu-nccl.sh: the C tests of tests/nccl, CuPy's and PyTorch's NCCL
#            clients over arcomm's libnccl.so.2 and over the real NCCL, nccl_time
#
# Where fewer than two GPUs are lent (a dry run), bench times arcomm alone with two
# process ranks sharing the GPU under a private MPS daemon (NCCL refuses two ranks on
# one GPU); tests and clients run what one GPU allows (they say what they skip).
# BENCH_MAX (default 128M) and BENCH_FACTOR (default 4) shape the sweeps, ARB_LIMIT
# (default 150 s) bounds each.  Never touches the GPUs' settings (NCCL_NVLS_ENABLE=0).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-two-out}
mkdir -p "$OUT"
export OUT NCCL_NVLS_ENABLE=0
export PATH=/usr/local/cuda/bin:$PATH
B=${BUILD:-/tmp/build-cuda}
phase=${1:-}
. tools/gpu-mps.sh # mps_start, mps_stop, ngpus
echo "== $phase on $ngpus GPU(s), $(date -u +%FT%TZ)" | tee "$OUT/two-$phase.txt"

# The ratios of one arbench log: per table (collective), peer / arcomm at the sizes
# named, and the lowest and highest over every size.
summary() {
  awk '
    /^# coll: / { coll = $3 }
    /^ +[0-9]+ / {
      n = split($0, f, " ")
      ratio = f[n]
      if (ratio !~ /^[0-9.]+$/) next
      key = coll
      if (!(key in lo) || ratio + 0 < lo[key]) lo[key] = ratio + 0
      if (!(key in hi) || ratio + 0 > hi[key]) hi[key] = ratio + 0
      if ($1 == 8 || $1 == 32768 || $1 == 2097152 || $1 == 134217728) at[key] = at[key] " " $1 ":" ratio
      if (!(key in order)) { order[key] = ++k; name[k] = key }
    }
    END {
      for (i = 1; i <= k; i++)
        printf "  %-15s ratio %s .. %s;%s\n", name[i], lo[name[i]], hi[name[i]], at[name[i]]
    }' "$1"
}

case $phase in
tests)
  DIAG=0 GRAPH_BENCH=0 P2P_BENCH=0 bash tools/gpu-check.sh tests 2>&1 | tail -60
  echo "gpu-check tests exit status ${PIPESTATUS[0]}" | tee -a "$OUT/two-$phase.txt"
  ;;
bench)
  DIAG=0 bash tools/gpu-check.sh build >"$OUT/build-step.txt" 2>&1 || {
    tail -20 "$OUT/build-step.txt"; exit 1; }
  AB="$B/tools/arbench/arbench"
  max=${BENCH_MAX:-128M} f=${BENCH_FACTOR:-4}
  [ "$ngpus" -lt 2 ] && mps_start "$OUT/two-$phase.txt"
  rc=0
  for tr in cuda cuda-p2p; do
    for g in "" --graph; do
      for nccl in default p2p-off; do
        if [ "$ngpus" -ge 2 ]; then
          args=(--device cuda -n 2 --transport $tr --coll all -b 8 -e "$max" -f "$f" --check
                $g --compare nccl)
        else
          [ $nccl = default ] || continue # arcomm alone: one sweep per transport and mode
          args=(--device cuda --procs -n 2 --transport $tr --coll all -b 8 -e "$max" -f "$f"
                --check $g)
        fi
        log="$OUT/bench-$tr${g:+-graph}-nccl-$nccl.log"
        echo "### arbench ${args[*]} (NCCL $nccl)" | tee -a "$OUT/two-$phase.txt"
        if [ $nccl = p2p-off ]; then
          NCCL_P2P_DISABLE=1 timeout "${ARB_LIMIT:-150}" "$AB" "${args[@]}" >"$log" 2>&1
        else
          timeout "${ARB_LIMIT:-150}" "$AB" "${args[@]}" >"$log" 2>&1
        fi
        a=$?
        # Rows with wrong elements: arcomm's #wrong (field 10), the peer's (field 17).
        wrong=$(awk '/^ +[0-9]+ / && ($10 != 0 || (NF >= 17 && $17 != 0)) {w++} END {print w + 0}' "$log")
        echo "exit status $a; rows with wrong elements: $wrong" | tee -a "$OUT/two-$phase.txt"
        [ "$wrong" = 0 ] || rc=1
        [ $a = 0 ] || { rc=1; grep -iE "error|arbench:" "$log" | head -5; }
        if [ "$ngpus" -ge 2 ]; then
          summary "$log" | tee -a "$OUT/two-$phase.txt"
        else
          awk '/^# coll: /{c=$3} /^ +[0-9]+ /{if ($1==8||$1==32768||$1==2097152||$1==134217728) t[c]=t[c] " " $1 ":" $5} END {for (c in t) printf "  %-15s us%s\n", c, t[c]}' \
            "$log" | sort | tee -a "$OUT/two-$phase.txt"
        fi
      done
    done
  done
  mps_stop
  exit $rc
  ;;
clients)
  bash tools/gpu-nccl.sh 2>&1 | tail -60
  echo "gpu-nccl exit status ${PIPESTATUS[0]}" | tee -a "$OUT/two-$phase.txt"
  ;;
*)
  echo "usage: $0 tests|bench|clients" >&2
  exit 2
  ;;
esac
