#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Host measurements for docs/PERFORMANCE.md: arcomm against Open MPI in the same run
# (2 thread ranks, 2 process ranks, 4 thread ranks on this host's cores), f32 sum,
# 4 B to 64 MiB, results checked.  Prints markdown tables; CSVs go to ${OUT:-perf-out}.
# LOAD=N runs N busy-looping processes (unpinned, like other work) for the whole run,
# to see how both degrade when they compete for the cores; ONLY=threads2|procs2|threads4
# runs one of the three; BUILD=DIR uses another build tree than build/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
bash tools/setup.sh "$build"
out=${OUT:-perf-out}
mkdir -p "$out"
rounds=${ROUNDS:-2}
run() { # label, csv, arbench args...
    local label=$1 csv=$2
    shift 2
    "./$build/tools/arbench/arbench" -b 4 -e 64M -f 4 --compare mpi --check --rounds "$rounds" \
        --csv "$out/$csv" "$@" >"$out/${csv%.csv}.txt" 2>&1
    python3 - "$label" "$out/$csv" <<'PY'
import csv, sys
label, path = sys.argv[1], sys.argv[2]
rows = [r for r in csv.reader(l for l in open(path) if not l.startswith('#'))]
head, rows = rows[0], rows[1:]
ix = {k: i for i, k in enumerate(head)}
def size(b):
    b = int(b)
    for u, s in ((1 << 20, 'MiB'), (1 << 10, 'KiB')):
        if b >= u and b % u == 0:
            return f'{b // u} {s}'
    return f'{b} B'
print(f'\n**{label}**\n')
print('| size/rank | arcomm median µs | arcomm p90 µs | arcomm busbw GB/s | Open MPI median µs | Open MPI busbw GB/s | ratio (MPI time / arcomm time) | wrong |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|')
for r in rows:
    g = lambda k: r[ix[k]]
    print(f"| {size(g('size'))} | {float(g('arcomm_time_us')):.2f} | {float(g('arcomm_p90_us')):.2f} | "
          f"{float(g('arcomm_busbw_gbs')):.3f} | {float(g('peer_time_us')):.2f} | "
          f"{float(g('peer_busbw_gbs')):.3f} | {float(g('ratio')):.2f} | "
          f"{int(g('arcomm_wrong'))}/{int(g('peer_wrong'))} |")
PY
}
load=${LOAD:-0}
busy=()
stop_load() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
    sh -c 'while :; do :; done' &
    busy+=($!)
done
only=${ONLY:-}
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
echo "load: $load busy-looping processes"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  host: $(hostname)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  cores: $(nproc)"
want threads2 && run "2 thread ranks (arbench -n 2) vs Open MPI, 2 processes" threads2.csv -n 2
want procs2 && run "2 process ranks under arrun (arbench -n 2 --procs) vs Open MPI, 2 processes" procs2.csv -n 2 --procs
want threads4 && run "4 thread ranks on $(nproc) cores (arbench -n 4) vs Open MPI, 4 processes" threads4.csv -n 4
true
