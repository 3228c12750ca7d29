# SPDX-License-Identifier: MIT
"""Summarise tools/bench/ds-compare.sh's runs: DeepSpeed against arcomm per size.

Reads DIR/ds-{inplace,outplace}-R.json (tools/bench/ds_allreduce.py --json) and
DIR/ar-{inplace,outplace}-R.json (arbench --json), R = 1, 2, ...  Prints one
markdown table per mode: per size the median over rounds of each side's median
time (each round's median is per call the slowest rank, median over calls), the
range over rounds, and ratio = DeepSpeed time / arcomm time (medians over
rounds), with the range of the per-round ratios (round r against round r).
Rows under TARGET (default 1.3) are marked.  With MAX_OTHERS (a percentage), only
the rounds whose two runs both saw other processes take at most that share of the
cores (DIR/load.txt) count.  Plain python3, no packages.

usage: ds_summary.py DIR... [TARGET [MAX_OTHERS]]   (the rounds of all DIRs together)
       ds_summary.py --by-state DIR... : the runs of all DIRs pooled, unpaired, split
           by the VM's state during each sweep, told by its time at 64 KiB (2-2.5x
           apart in the two states on either side; the smallest size's where the
           sweep lacks 64 KiB): the runs of one side and mode sorted by it, split at
           the widest gap (a step of 3% at least), fast below and slow above (a sweep
           that flips state midway is classed by where it was at 64 KiB)
"""

import glob
import json
import os
import re
import statistics
import sys


def others_share(outdir):
    """{(side, mode, round): percent of the cores other processes took during the run}"""
    shares = {}
    key = None
    try:
        with open(os.path.join(outdir, "load.txt")) as f:
            for line in f:
                m = re.match(r"== round (\d+): (DeepSpeed|arcomm) (\w+)", line)
                if m:
                    key = ("ds" if m[2] == "DeepSpeed" else "ar", m[3], m[1])
                    continue
                m = re.search(r"\((\d+)% of \d+ cores\)", line)
                if m and key:
                    shares[key] = int(m[1])
                    key = None
    except FileNotFoundError:
        pass
    return shares


def load(path, side):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for row in doc["rows"]:
        if side == "ds":
            out[row["size"]] = (row["time_us"], row["wrong"])
        else:
            a = row["arcomm"]
            out[row["size"]] = (a["time_us"], a["wrong"])
    return out


def human(size):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div and size % div == 0:
            return f"{size // div} {unit}"
    return f"{size} B"


def fmt(us):
    return f"{us:.2f}" if us < 100 else f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def table(outdirs, mode, target, max_others=None):
    rounds = []
    kept = []
    for outdir in outdirs:
        for line in paired(outdir, mode, max_others):
            rounds.append(line[0])
            kept.append(line[1] if len(outdirs) == 1 else f"{os.path.basename(outdir.rstrip('/'))}:{line[1]}")
    return render(rounds, kept, mode, target, max_others)


def paired(outdir, mode, max_others):
    ds_files = sorted(glob.glob(os.path.join(outdir, f"ds-{mode}-*.json")))
    shares = others_share(outdir)
    out = []
    for dsf in ds_files:
        r = dsf.rsplit("-", 1)[1].split(".")[0]
        arf = os.path.join(outdir, f"ar-{mode}-{r}.json")
        if not os.path.exists(arf):
            continue
        sd, sa = shares.get(("ds", mode, r)), shares.get(("ar", mode, r))
        if max_others is not None and (sd is None or sa is None or max(sd, sa) > max_others):
            continue
        out.append(((load(dsf, "ds"), load(arf, "ar")), f"{r} ({sd}%/{sa}%)" if sd is not None else r))
    return out


def render(rounds, kept, mode, target, max_others):
    if not rounds:
        return [f"{mode}: no rounds" + (f" with others <= {max_others}%" if max_others is not None else ""), ""]
    sizes = sorted(set.intersection(*(set(d) & set(a) for d, a in rounds)))
    title = "in place" if mode == "inplace" else "out of place"
    lines = [f"{title}, {len(rounds)} rounds (µs: median over rounds [min-max]; ratio = DeepSpeed / arcomm)",
             "rounds (share of the cores others took, DeepSpeed run/arcomm run): " + ", ".join(kept),
             "",
             "| size | DeepSpeed µs | arcomm µs | ratio | per-round ratios | #wrong |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    below = []
    for s in sizes:
        ds = [d[s][0] for d, _ in rounds]
        ar = [a[s][0] for _, a in rounds]
        wrong = sum((d[s][1] or 0) + (a[s][1] or 0) for d, a in rounds)
        dm, am = statistics.median(ds), statistics.median(ar)
        ratio = dm / am
        per = [x / y for x, y in zip(ds, ar)]
        mark = " **below**" if ratio < target else ""
        if ratio < target:
            below.append(f"{human(s)} {ratio:.2f}x")
        lines.append(f"| {human(s)} | {fmt(dm)} [{fmt(min(ds))}-{fmt(max(ds))}] "
                     f"| {fmt(am)} [{fmt(min(ar))}-{fmt(max(ar))}] | {ratio:.2f}x{mark} "
                     f"| {min(per):.2f}-{max(per):.2f} | {wrong} |")
    lines.append("")
    lines.append(f"below {target}x: " + (", ".join(below) if below else "none"))
    lines.append("")
    return lines


STATE_SIZE = 64 << 10  # the size whose time tells the state: 2-2.5x apart in the two


def split_point(ts):
    """The value below the widest gap of the sorted times, when that gap is a step of
    at least 3%; else the largest (all runs in one state)."""
    best, cut = 0.0, ts[-1]
    for lo, hi in zip(ts, ts[1:]):
        if hi - lo > best and hi >= 1.03 * lo:
            best, cut = hi - lo, lo
    return cut


def by_state(dirs, target):
    runs = {}  # (side, mode) -> [{size: (us, wrong)}]
    for d in dirs:
        for side in ("ds", "ar"):
            for mode in ("inplace", "outplace"):
                for f in sorted(glob.glob(os.path.join(d, f"{side}-{mode}-*.json"))):
                    runs.setdefault((side, mode), []).append(load(f, side))
    lines = []
    for mode in ("inplace", "outplace"):
        classed = {}
        for side in ("ds", "ar"):
            rs = runs.get((side, mode), [])
            if not rs:
                continue
            small = STATE_SIZE if all(STATE_SIZE in r for r in rs) else min(rs[0])
            cut = split_point(sorted(r[small][0] for r in rs))
            for r in rs:
                state = "fast" if r[small][0] <= cut else "slow"
                classed.setdefault((side, state), []).append(r)
        title = "in place" if mode == "inplace" else "out of place"
        for state in ("fast", "slow"):
            ds, ar = classed.get(("ds", state), []), classed.get(("ar", state), [])
            if not ds or not ar:
                lines += [f"{title}, {state} state: DeepSpeed {len(ds)} runs, arcomm {len(ar)} runs", ""]
                continue
            sizes = sorted(set.intersection(*(set(r) for r in ds + ar)))
            lines += [f"{title}, {state} state: DeepSpeed {len(ds)} runs, arcomm {len(ar)} runs "
                      "(µs: median over runs [min-max]; ratio = DeepSpeed / arcomm)", "",
                      "| size | DeepSpeed µs | arcomm µs | ratio |", "| ---: | ---: | ---: | ---: |"]
            below = []
            for s_ in sizes:
                dv, av = [r[s_][0] for r in ds], [r[s_][0] for r in ar]
                ratio = statistics.median(dv) / statistics.median(av)
                mark = " **below**" if ratio < target else ""
                if ratio < target:
                    below.append(f"{human(s_)} {ratio:.2f}x")
                lines.append(f"| {human(s_)} | {fmt(statistics.median(dv))} [{fmt(min(dv))}-{fmt(max(dv))}] "
                             f"| {fmt(statistics.median(av))} [{fmt(min(av))}-{fmt(max(av))}] | {ratio:.2f}x{mark} |")
            lines += ["", f"below {target}x: " + (", ".join(below) if below else "none"), ""]
    return lines


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--by-state":
        print("\n".join(by_state(sys.argv[2:], 1.3)))
        return 0
    if len(sys.argv) < 2:
        sys.stderr.write("usage: ds_summary.py DIR [TARGET]\n")
        return 2
    dirs = [a for a in sys.argv[1:] if os.path.isdir(a)]
    nums = [float(a) for a in sys.argv[1:] if not os.path.isdir(a)]
    target = nums[0] if nums else 1.3
    max_others = nums[1] if len(nums) > 1 else None
    for mode in ("inplace", "outplace"):
        print("\n".join(table(dirs, mode, target, max_others)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
