# SPDX-License-Identifier: MIT
# Sourced by tools/gpu-check.sh and tools/gpu-two.sh (needs $OUT).
# Process ranks sharing one GPU time-slice without MPS (a call then costs a slice, ~2.7
# ms): mps_start starts a private MPS daemon (no GPU setting changes) and sets mps=1,
# mps_stop quits it and keeps its log under $OUT/mps-log.
mps=0
mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null || return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/arcomm-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/arcomm-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps=1
  echo "MPS daemon started: $mps" | tee -a "$1"
}
mps_stop() {
  [ $mps = 1 ] || return 0
  echo quit | nvidia-cuda-mps-control
  cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps-log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  mps=0
}
# How many GPUs this machine lends (process ranks share one where it is 1).
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
