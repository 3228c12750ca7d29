#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# libarcomm_pmpi against Open MPI alone and against arcomm's own API, in one sitting:
# for each collective, in ROUNDS interleaved rounds, arbench-mpi under mpirun without the
# library (Open MPI), the same with LD_PRELOAD=libarcomm_pmpi.so (the MPI program on
# arcomm) and arbench --procs (arcomm's API, process ranks), over the same sizes; prints
# per size the medians over the rounds, MPI / pmpi (the speedup an unmodified program
# gets) and pmpi - arcomm (the interposition's own cost per call).  docs/pmpi.md has
# the numbers.  Broadcast is timed in place everywhere (MPI_Bcast has no other form).
# With HEAP=1 the pmpi and arcomm runs have the shared heap too (libarcomm_heap.so after
# libarcomm_pmpi.so in LD_PRELOAD; arbench --shared-heap): the program's malloc'd buffers
# are then reachable by the other ranks, and the one-pass paths serve them.
#   tools/pmpi-bench.sh [BUILD] [OUTDIR]     env: NP (2), ROUNDS (3), MIN (4), MAX (64M),
#                                            FACTOR (4), COLLS (all six), HEAP (0)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$(mktemp -d)}
np=${NP:-2} rounds=${ROUNDS:-3} min=${MIN:-4} max=${MAX:-64M} factor=${FACTOR:-4}
colls=${COLLS:-allreduce broadcast reduce allgather reduce_scatter alltoall}
lib=$(readlink -f "$build/runtime/pmpi/libarcomm_pmpi.so")
heap=()
if [ "${HEAP:-0}" = 1 ]; then
    lib="$lib:$(readlink -f "$build/libarcomm_heap.so")"
    heap=(--shared-heap)
fi
mkdir -p "$out"
sweep=(-b "$min" -e "$max" -f "$factor")
floor="$build/tools/arbench/shm-floor"
for round in $(seq 1 "$rounds"); do
    for coll in $colls; do
        extra=()
        [ "$coll" = broadcast ] && extra=(--inplace)
        mpirun --allow-run-as-root -np "$np" "$build/tools/arbench/arbench-mpi" --coll "$coll" \
            "${sweep[@]}" "${extra[@]}" --csv-stdout >"$out/mpi-$coll-$round.csv"
        mpirun --allow-run-as-root -np "$np" -x "LD_PRELOAD=$lib" -x ARCOMM_LOG_LEVEL=warn \
            "$build/tools/arbench/arbench-mpi" --coll "$coll" "${sweep[@]}" "${extra[@]}" \
            --csv-stdout >"$out/pmpi-$coll-$round.csv"
        "$build/tools/arbench/arbench" --procs "${heap[@]}" -n "$np" --coll "$coll" \
            "${sweep[@]}" "${extra[@]}" --csv "$out/arcomm-$coll-$round.csv" >/dev/null
        if [ "$coll" = allgather ] && [ "$np" = 2 ] && [ -x "$floor" ]; then
            "$floor" -r 3 "${sweep[@]}" >"$out/floor-$coll-$round.txt"
        fi
    done
    echo "pmpi-bench: round $round of $rounds done" >&2
done
python3 - "$out" "$colls" <<'PY'
import csv, glob, os, statistics, sys
out, colls = sys.argv[1], sys.argv[2].split()
def load(kind, coll):
    t = {}
    for path in sorted(glob.glob(os.path.join(out, f"{kind}-{coll}-*.csv"))):
        rows = [l for l in open(path) if not l.startswith("#")]
        for r in csv.DictReader(rows):
            t.setdefault(int(r["size"]), []).append(float(r["time_us"]))
    return {s: statistics.median(v) for s, v in t.items()}
def load_floor(coll):
    t = {}
    for path in sorted(glob.glob(os.path.join(out, f"floor-{coll}-*.txt"))):
        for line in open(path):
            f = line.split()
            if f and not line.startswith("#"):
                t.setdefault(int(f[0]), []).append(float(f[1]))
    return {s: statistics.median(v) for s, v in t.items()}
def human(n):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n} B"
for coll in colls:
    mpi, pmpi, arc = load("mpi", coll), load("pmpi", coll), load("arcomm", coll)
    floor = load_floor(coll)
    print(f"\n{coll} (median µs per call over the rounds)\n")
    head = "| size | Open MPI | MPI on arcomm (pmpi) | arcomm API | MPI / pmpi | pmpi − API (µs) |"
    rule = "|---:|---:|---:|---:|---:|---:|"
    if floor:
        head += " bare floor | MPI / floor |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for s in sorted(mpi):
        if s in pmpi and s in arc:
            row = (f"| {human(s)} | {mpi[s]:.2f} | {pmpi[s]:.2f} | {arc[s]:.2f} | "
                   f"{mpi[s] / pmpi[s]:.2f}x | {pmpi[s] - arc[s]:+.2f} |")
            if floor and s in floor:
                row += f" {floor[s]:.2f} | {mpi[s] / floor[s]:.2f}x |"
            print(row)
PY
echo "pmpi-bench: CSVs in $out" >&2
