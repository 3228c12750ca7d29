#!/bin/bash
# SPDX-License-Identifier: MIT
# libarcomm_nccl on the lent GPU machine, in one call: build (or reuse $BUILD of
# gpu-check.sh), run the C tests of tests/nccl, CuPy's and PyTorch's NCCL clients over
# arcomm's libnccl.so.2 and then over the real NCCL (the torch wheel's), and time an
# allreduce through the NCCL API against arcomm's own API (nccl_time) and arbench
# --compare nccl; logs under $OUT, a table at the end.
#
#   eval "$(bash .deps/unpack.sh)"; bash tools/gpu-nccl.sh
#
# RANKS (default 2): process ranks of the tests and clients over arcomm (they may share
# a GPU); the real NCCL gets one rank per GPU (it refuses two ranks on one GPU).
# STEP_LIMIT (seconds, default 300) bounds every step.  PYTHON (default python3).
# Never touches the GPUs' settings.  NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-nccl-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export PATH=/usr/local/cuda/bin:$PATH
export LIBRARY_PATH=${LD_LIBRARY_PATH:-}:${LIBRARY_PATH:-}
cd "$(dirname "$0")/.."
SRC=$PWD
B=${BUILD:-/tmp/build-cuda}
PY=${PYTHON:-python3}
RANKS=${RANKS:-2}
LIMIT=${STEP_LIMIT:-300}
BASE_LDP=${LD_LIBRARY_PATH:-}
REAL=$($PY -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' \
       2>/dev/null || echo /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib)
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NG" -ge 1 ] 2>/dev/null || NG=1
rows=()
rc=0
# The arcomm-* names in /dev/shm before the steps: only names the steps made count below
# (another job's beside this one never do).
shm_before=$(ls /dev/shm 2>/dev/null | grep '^arcomm-' | sort)

{
  date -u
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv
  echo "real NCCL: $REAL"; ls -l "$REAL" 2>&1
} > "$OUT/machine.txt" 2>&1

echo "== build ($B)" | tee "$OUT/build.log"
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dgpu_arch=sm_90 --werror -Dmpi=disabled >>"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
fi
targets="runtime/nccl/libnccl.so.2.19.3 tests/nccl/test_nccl_abi tests/nccl/nccl_ggml \
  tests/nccl/nccl_procs tests/nccl/nccl_time tools/arbench/arbench"
if ! ninja -C "$B" $targets >>"$OUT/build.log" 2>&1; then
  grep -B2 -A12 FAILED "$OUT/build.log" | head -60
  exit 1
fi
tail -2 "$OUT/build.log"
LIB=$B/runtime/nccl
[ -e "$LIB/libnccl.so.2" ] || { echo "no $LIB/libnccl.so.2 (is the nccl option off?)"; exit 1; }

# step NAME EXPECT CMD...: runs CMD (bounded), log in $OUT/NAME.log; EXPECT is the text
# a passing run prints (its last PASS/ok line is shown).  Records NAME, rc, verdict.
step() {
  local name=$1 expect=$2
  shift 2
  echo "== $name" | tee "$OUT/$name.log"
  echo "\$ $*" >>"$OUT/$name.log"
  timeout "$LIMIT" "$@" >>"$OUT/$name.log" 2>&1
  local r=$?
  grep -E "^(ok|FAIL|SKIP|PASS|info|time|libnccl|cupy|torch|#)" "$OUT/$name.log" | grep -v "^ok" | tail -25
  local verdict=pass
  if [ $r = 77 ]; then
    verdict=skip
  elif [ $r != 0 ]; then
    verdict=FAIL
  elif [ -n "$expect" ] && ! grep -q -- "$expect" "$OUT/$name.log"; then
    verdict="FAIL (no '$expect' in the log: the wrong libnccl was loaded?)"
  fi
  [ "$verdict" = FAIL ] || [ "${verdict#FAIL}" != "$verdict" ] && rc=1
  echo "$name: exit status $r, $verdict"
  rows+=("$(printf '%-28s %4s  %s' "$name" "$r" "$verdict")")
}

# The loader's path to arcomm's libnccl.so.2, or to the real one (timeout runs programs,
# not functions: these are command prefixes).
ARC=(env LD_LIBRARY_PATH="$LIB:$BASE_LDP")
RNC=(env LD_LIBRARY_PATH="$REAL:$BASE_LDP")

# Without a GPU too (CI runs these): the ABI and the exports.
step abi "" "${ARC[@]}" "$B/tests/nccl/test_nccl_abi"
step exports PASS bash tests/nccl/nm_check.sh "$LIB/libnccl.so.2" include/nccl/nccl.h \
  "$REAL/libnccl.so.2"

# The C tests, over arcomm, then over the real NCCL (which checks the tests themselves).
step c-ggml-arcomm "(arcomm)" "${ARC[@]}" "$B/tests/nccl/nccl_ggml"
step c-procs-arcomm "(arcomm)" "${ARC[@]}" env NCCL_TEST_RANKS="$RANKS" "$B/tests/nccl/nccl_procs"
step c-procs3-arcomm "(arcomm)" "${ARC[@]}" env NCCL_TEST_RANKS=3 "$B/tests/nccl/nccl_procs"
step c-ggml-real "(real NCCL)" "${RNC[@]}" "$B/tests/nccl/nccl_ggml"
step c-procs-real "(real NCCL)" "${RNC[@]}" env NCCL_TEST_RANKS="$NG" "$B/tests/nccl/nccl_procs"

# CuPy 14 loads the nvidia-nccl wheel's libnccl.so.2 by path itself (seen 2026-12-01:
# LD_LIBRARY_PATH alone left it on the real NCCL), so arcomm's is preloaded: the global
# scope then binds every ncclXxx to arcomm's (the client prints which served, and what
# is mapped).
step cupy-arcomm "(arcomm)" "${ARC[@]}" env LD_PRELOAD="$LIB/libnccl.so.2" \
  "$PY" tests/nccl/cupy_client.py --ranks "$RANKS"
step cupy-real "(real NCCL)" "${RNC[@]}" "$PY" tests/nccl/cupy_client.py --ranks "$NG"
# PyTorch: libtorch_cuda's RPATH wins over LD_LIBRARY_PATH, so arcomm's is preloaded.
step torch-arcomm "(arcomm)" "${ARC[@]}" env LD_PRELOAD="$LIB/libnccl.so.2" \
  "$PY" tests/nccl/torch_client.py --ranks "$RANKS"
step torch-real "(real NCCL)" "$PY" tests/nccl/torch_client.py --ranks "$NG"

# Timing: one binary, arcomm's API against the NCCL API over arcomm (same processes,
# same GPUs), then the real NCCL; and arbench's own comparison (--compare nccl loads
# libnccl.so.2: arcomm's here, so its 'peer' columns are arcomm through the NCCL API).
T="$B/tests/nccl/nccl_time"
targs="-b 8 -e 64M -f 4 --iters ${TIME_ITERS:-200}"
step time-both "(arcomm)" "${ARC[@]}" "$T" --both -n "$RANKS" $targs
step time-real "(real NCCL)" "${RNC[@]}" "$T" -n "$NG" $targs
AB="$B/tools/arbench/arbench"
step arbench-vs-libnccl "" "${ARC[@]}" "$AB" --device cuda -n "$NG" -b 8 -e 64M -f 4 --check \
  --compare nccl

echo "== direct API vs NCCL API over arcomm ($RANKS process ranks, interleaved, median us)" \
  | tee "$OUT/overhead.txt"
grep -E '^ +[0-9]+ |^# [0-9]+ of' "$OUT/time-both.log" | tee -a "$OUT/overhead.txt"
echo "real NCCL ($NG rank(s)):" | tee -a "$OUT/overhead.txt"
grep -E '^ +[0-9]+ ' "$OUT/time-real.log" | tee -a "$OUT/overhead.txt"

# Names made since the start that stay for 2 s: what the steps left behind.
new_names() { comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | grep '^arcomm-' | sort); }
left=$(new_names)
[ -z "$left" ] || { sleep 2; left=$(comm -12 <(echo "$left") <(new_names)); }
[ -z "$left" ] || { echo "left in /dev/shm: $(echo $left)"; rc=1; }

echo "== summary (logs in $OUT)"
printf '%-28s %4s  %s\n' step rc verdict
for r in "${rows[@]}"; do echo "$r"; done
grep -h "^info" "$OUT/torch-arcomm.log" 2>/dev/null | sed 's/^/torch over arcomm: /'
exit $rc
