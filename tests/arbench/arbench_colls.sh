#!/bin/sh
# SPDX-License-Identifier: MIT
# Every collective of arbench, checked, with the columns that came with them:
#   arbench_colls.sh threads|procs|mpi ARBENCH
# threads: each --coll value alone (3 thread ranks, out of place and in place), then
#          --coll all on 1 rank and with --json (every row carries coll, ceiling_frac);
# procs:   --coll all on 2 process ranks under arrun;
# mpi:     --coll all against Open MPI (out of place, and in place on 3 ranks), and
#          arbench-mpi alone on the 0.2 dtypes.
# Every row must have #wrong == 0 (and the peer's), its coll, a ceiling > 0 and a
# fraction > 0.  Exit 77 (meson: skipped) when arrun, or mpirun / arbench-mpi, is missing.
set -u
mode=$1
arbench=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/arbench-colls.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
bindir=$(dirname "$arbench")
colls="allreduce broadcast reduce allgather reduce_scatter alltoall"
small="-b 4 -e 16K -f 8 --iters 3 --warmup 1 --check"
bad=0

# rows CSV WANT_ROWS [COLL]: the sweep CSV (or the --compare one: peer columns too) has
# WANT_ROWS rows, every wrong column 0, coll COLL (any of $colls when not given), a
# ceiling and ceiling fractions > 0.
rows() {
    awk -F, -v want="$2" -v only="${3:-}" -v colls="$colls" '
        /^#/ { next }
        !hdr {
            hdr = 1
            for (i = 1; i <= NF; i++) col[$i] = i
            if (!("coll" in col) || !("ceiling_gbs" in col)) { print FILENAME ": no coll/ceiling_gbs column: " $0; bad = 1 }
            peer = ("peer_wrong" in col)
            next
        }
        {
            rows++
            c = $col["coll"]
            if (only != "" && c != only) { print "row " $1 ": coll " c ", expected " only; bad = 1 }
            if (index(" " colls " ", " " c " ") == 0) { print "row " $1 ": unknown coll " c; bad = 1 }
            seen[c] = 1
            w = peer ? $col["arcomm_wrong"] : $col["wrong"]
            if (w != "0") { print c " size " $1 ": wrong " w; bad = 1 }
            if (peer && $col["peer_wrong"] != "0") { print c " size " $1 ": peer wrong " $col["peer_wrong"]; bad = 1 }
            if (!($col["ceiling_gbs"] > 0)) { print c " size " $1 ": no ceiling"; bad = 1 }
            f = peer ? $col["arcomm_ceiling_frac"] : $col["ceiling_frac"]
            if (!(f > 0)) { print c " size " $1 ": ceiling fraction " f; bad = 1 }
        }
        END {
            if (rows != want) { print FILENAME ": expected " want " rows, got " rows; bad = 1 }
            exit bad
        }' "$1" || { echo "in $1:"; cat "$1"; bad=1; }
}

# run NAME ARGS...: arbench ARGS must exit 0.
run() {
    name=$1
    shift
    # shellcheck disable=SC2068
    "$arbench" "$@" >"$dir/out" 2>"$dir/err" || {
        echo "$name: arbench $* exited with $?:"; cat "$dir/err"; bad=1; }
}

case $mode in
threads)
    for c in $colls; do
        # shellcheck disable=SC2086
        run "$c" -n 3 --coll "$c" $small --csv "$dir/$c.csv"
        rows "$dir/$c.csv" 5 "$c"
        grep -q "^# ceiling: memcpy" "$dir/out" || { echo "$c: no ceiling line"; bad=1; }
        grep -Eq "^# floor: [0-9]+\.[0-9]+ us per round" "$dir/out" ||
            { echo "$c: no floor line"; bad=1; }
        [ "$c" = alltoall ] && continue
        # shellcheck disable=SC2086
        run "$c in place" -n 3 --coll "$c" --inplace $small --csv "$dir/$c-ip.csv"
        rows "$dir/$c-ip.csv" 5 "$c"
    done
    # One rank: every collective is a copy (or nothing) and still checked.
    # shellcheck disable=SC2086
    run "all, 1 rank" -n 1 --coll all $small --csv "$dir/one.csv"
    rows "$dir/one.csv" 30
    # shellcheck disable=SC2086
    run "all, JSON" -n 2 --coll all $small -d f16 --json "$dir/all.json"
    [ "$(grep -c '^# arbench: ' "$dir/out")" -eq 6 ] || { echo "--coll all: not 6 tables"; bad=1; }
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$dir/all.json" <<'EOF' || bad=1
import json, sys
d = json.load(open(sys.argv[1]))
colls = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]
assert d["coll"] == "all", d["coll"]
assert d["ceiling_gbs"] > 0, d["ceiling_gbs"]
assert d["floor_us"] > 0 and d["floor_us"] < 1e5, d["floor_us"]
seen = [r["coll"] for r in d["rows"]]
assert sorted(set(seen)) == sorted(colls), seen
for r in d["rows"]:
    assert r["arcomm"]["wrong"] == 0, r
    assert r["arcomm"]["ceiling_frac"] > 0, r
    assert r["op"] == ("sum" if r["coll"] in ("allreduce", "reduce", "reduce_scatter") else "none"), r
EOF
    else
        echo "python3 missing: the JSON is not checked"
    fi
    ;;
procs)
    if [ ! -x "$bindir/../arrun/arrun" ] && ! command -v arrun >/dev/null 2>&1; then
        echo "arrun not built: skipping"; exit 77
    fi
    # shellcheck disable=SC2086
    run "procs" --procs -n 2 --coll all $small --csv "$dir/procs.csv"
    rows "$dir/procs.csv" 30
    # Buffers from comm_mem_alloc: the one-pass paths between processes, checked.
    # shellcheck disable=SC2086
    run "procs, segment buffers" --procs -n 2 --coll all --mem-alloc $small \
        --json "$dir/seg.json" --csv "$dir/seg.csv"
    rows "$dir/seg.csv" 30
    grep -q "buffers: comm_mem_alloc" "$dir/out" || { echo "--mem-alloc: not in the header"; bad=1; }
    grep -q '"buffers": "comm_mem_alloc"' "$dir/seg.json" ||
        { echo "--mem-alloc: not in the JSON"; bad=1; }
    # Inputs written and outputs read between calls (untimed), in place too.
    # shellcheck disable=SC2086
    run "procs, fresh" --procs -n 2 --coll all --fresh $small --json "$dir/fresh.json" \
        --csv "$dir/fresh.csv"
    rows "$dir/fresh.csv" 30
    grep -q "after the rank wrote its input and read its output" "$dir/out" ||
        { echo "--fresh: not in the header"; bad=1; }
    grep -q '"fresh": true' "$dir/fresh.json" || { echo "--fresh: not in the JSON"; bad=1; }
    # shellcheck disable=SC2086
    run "procs, fresh, in place" --procs -n 3 --coll all --fresh --inplace $small \
        --csv "$dir/fresh-ip.csv"
    rows "$dir/fresh-ip.csv" 25
    ;;
mpi)
    if ! command -v mpirun >/dev/null 2>&1 || [ ! -x "$bindir/arbench-mpi" ]; then
        echo "mpirun or arbench-mpi missing: skipping"; exit 77
    fi
    # shellcheck disable=SC2086
    run "mpi" -n 2 --coll all $small --compare mpi --csv "$dir/mpi.csv"
    rows "$dir/mpi.csv" 30
    # In place on 3 ranks (alltoall has no in-place form: left out).
    # shellcheck disable=SC2086
    run "mpi in place" -n 3 --coll all --inplace -b 4 -e 1K -f 16 --iters 3 --warmup 1 --check \
        --compare mpi --csv "$dir/mpi-ip.csv"
    rows "$dir/mpi-ip.csv" 15
    grep -q "alltoall: left out" "$dir/out" || { echo "--inplace --coll all: alltoall not said"; bad=1; }
    # --fresh reaches the MPI peer too (its rows are checked like arcomm's).
    # shellcheck disable=SC2086
    run "mpi fresh" -n 2 --coll all --fresh $small --compare mpi --csv "$dir/mpi-fresh.csv"
    rows "$dir/mpi-fresh.csv" 30
    # The 0.2 dtypes through Open MPI alone (the library's own come with its branch).
    for spec in "i8 sum reduce_scatter" "u8 max allreduce" "u32 prod reduce" "u64 min allreduce" \
        "i8 none alltoall" "u64 none allgather"; do
        # shellcheck disable=SC2086
        set -- $spec
        op=$2
        [ "$op" = none ] && op=sum
        mpirun --allow-run-as-root --oversubscribe -np 2 "$bindir/arbench-mpi" --coll "$3" -d "$1" \
            -o "$op" -b 4 -e 1K -f 16 --iters 3 --warmup 1 --check --csv-stdout \
            >"$dir/dt.csv" 2>"$dir/err" || { echo "arbench-mpi $spec: exit $?"; cat "$dir/err"; bad=1; }
        awk -F, '/^[0-9]/ && $11 != "0" { print "arbench-mpi '"$spec"': size " $1 " wrong " $11; bad = 1 }
            END { exit bad }' "$dir/dt.csv" || bad=1
    done
    ;;
*)
    echo "usage: $0 threads|procs|mpi ARBENCH"; exit 2 ;;
esac
exit $bad
