#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Markdown tables of arbench runs, for docs/PERFORMANCE.md and the README.

Each table is one configuration of arbench run several times (``arbench ... --json
FILE``, one file a run): a row a message size, with arcomm's median time over the runs
and their spread (lowest to highest), the peer's (Open MPI, NCCL) the same way, the
ratio peer / arcomm, busbw and the wrong elements.  Above each table: when (the runs'
dates), where (host, cpu, cpus, from the JSON) and the exact command.

    perf_report.py --run NAME FILE [FILE...] [--run NAME2 FILE...] [--write PATH]...

Without --write the tables are printed.  With --write, in each PATH, the text between
``<!-- perf:NAME:begin -->`` and ``<!-- perf:NAME:end -->`` becomes table NAME, and
the text between ``<!-- perf:begin -->`` and ``<!-- perf:end -->`` the summary of every
table (a few sizes side by side: the README's table).  A PATH without either marker is
an error; markers of a NAME not given are left as they are.  Python 3 standard library
only.
"""
import argparse
import datetime
import json
import re
import statistics
import sys

SUMMARY_SIZES = [4, 256, 4096, 65536, 1 << 20, 16 << 20, 64 << 20]
PEER_NAMES = {"mpi": "Open MPI", "nccl": "NCCL"}


def fmt_size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def fmt_us(t):
    if t >= 100:
        return f"{t:.0f}"
    if t >= 10:
        return f"{t:.1f}"
    return f"{t:.2f}"


def fmt_spread(values, fmt):
    """The median, and lowest-highest when the runs differ in the shown digits."""
    mid, lo, hi = fmt(statistics.median(values)), fmt(min(values)), fmt(max(values))
    return mid if lo == hi else f"{mid} ({lo}-{hi})"


def parse_date(text):
    """arbench's date ("2026-12-07 12:09:24 +0000"), as UTC."""
    try:
        d = datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        raise SystemExit(f"perf_report: a date arbench did not write: {text!r}")
    return d.astimezone(datetime.timezone.utc)


def fmt_when(dates):
    lo, hi = min(dates), max(dates)
    if lo.date() == hi.date():
        span = lo.strftime("%H:%M") if lo.strftime("%H:%M") == hi.strftime("%H:%M") \
            else f"{lo:%H:%M}-{hi:%H:%M}"
        return f"{lo:%Y-%m-%d}, {span} UTC"
    return f"{lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC"


def strip_outputs(command):
    """The command without the files it wrote (--json FILE, --csv FILE, --plot FILE)."""
    return re.sub(r" --(json|csv|plot)(=| )\S+", "", command)


def fmt_ratio(r):
    return f"{r:.2f}x"


class Table:
    """The runs of one configuration."""

    def __init__(self, name, paths):
        self.name = name
        self.runs = []
        for p in paths:
            with open(p, encoding="utf-8") as f:
                run = json.load(f)
            if run.get("tool") != "arbench":
                raise SystemExit(f"perf_report: {p} is not arbench's JSON")
            self.runs.append(run)
        first = self.runs[0]
        keys = ("mode", "nranks", "device", "dtype", "op", "coll", "buffers", "peer", "inplace")
        for p, run in zip(paths, self.runs):
            for k in keys:
                if run.get(k) != first.get(k):
                    raise SystemExit(f"perf_report: {p}: {k} is {run.get(k)!r}, the first "
                                     f"run of table {name} has {first.get(k)!r}")
        # (coll, size) -> list over runs of the row; only the rows every run has.
        self.rows = {}
        for run in self.runs:
            for row in run["rows"]:
                self.rows.setdefault((row["coll"], row["size"]), []).append(row)
        n = len(self.runs)
        self.keys = sorted((k for k, v in self.rows.items() if len(v) == n),
                           key=lambda k: (k[0], k[1]))
        self.peer = first.get("peer")

    def what(self):
        r = self.runs[0]
        ranks = f"{r['nranks']} {'process' if r['mode'] == 'procs' else 'thread'} ranks"
        if r["mode"] not in ("threads", "procs"):
            ranks = f"{r['nranks']} ranks ({r['mode']})"
        bufs = {"shared-heap": ", shared heap", "comm_mem_alloc": ", comm_mem_alloc buffers"}
        peer = f", against {PEER_NAMES.get(self.peer, self.peer)} in the same run" if self.peer else ""
        colls = {k[0] for k in self.keys}
        coll = r["coll"] if len(colls) == 1 else "every collective"
        op = f" {r['op']}" if coll in ("allreduce", "reduce", "reduce_scatter") else ""
        return (f"{ranks}{bufs.get(r['buffers'], '')}, {r['device']}, {coll}, "
                f"{r['dtype']}{op}{' in place' if r['inplace'] else ''}{peer}")

    def dates(self):
        return [parse_date(r["date"]) for r in self.runs]

    def where(self):
        when = fmt_when(self.dates())
        machines = sorted({(r["machine"]["host"], r["machine"]["cpu"], r["machine"]["nproc"])
                           for r in self.runs})
        where = "; ".join(f"{cpu}, {nproc} cpus (host {host})" for host, cpu, nproc in machines)
        commands = sorted({strip_outputs(r["command"]) for r in self.runs})
        cmd = " / ".join(f"`{c}`" for c in commands)
        return when, where, cmd

    def floors(self):
        """arbench's exchange floor of each run, in µs: it tells the VM's state."""
        f = [r["floor_us"] for r in self.runs if r.get("floor_us")]
        return ", ".join(f"{v:.3f}" for v in f)

    def stats(self, key, side, field):
        return [row[side][field] for row in self.rows[key]]

    def wrong(self, key):
        w = [row[s]["wrong"] for row in self.rows[key] for s in ("arcomm", "peer")
             if row.get(s) and row[s].get("wrong") is not None]
        return str(sum(w)) if w else "not checked"

    def markdown(self):
        when, where, cmd = self.where()
        n = len(self.runs)
        out = [f"**{self.what()}.** {when}; {where}; {n} run{'s' if n > 1 else ''} of {cmd}. "
               f"Times are arbench's (per call the slowest rank, median over calls and "
               f"rounds); each cell is the median over the runs, the lowest and highest in "
               f"brackets."
               + (f" Exchange floor of each run: {self.floors()} µs." if self.floors() else ""),
               ""]
        multi = len({k[0] for k in self.keys}) > 1
        head = (["collective"] if multi else []) + ["size", "arcomm µs", "arcomm busbw GB/s"]
        if self.peer:
            peer = PEER_NAMES.get(self.peer, self.peer)
            head += [f"{peer} µs", f"{peer} / arcomm"]
        head.append("wrong")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join("---" if h == "collective" else "---:" for h in head) + "|")
        for key in self.keys:
            cells = ([key[0]] if multi else []) + [
                fmt_size(key[1]),
                fmt_spread(self.stats(key, "arcomm", "time_us"), fmt_us),
                fmt_spread(self.stats(key, "arcomm", "busbw_gbs"), lambda v: f"{v:.2f}"),
            ]
            if self.peer:
                cells.append(fmt_spread(self.stats(key, "peer", "time_us"), fmt_us))
                cells.append(fmt_spread([row["ratio"] for row in self.rows[key]], fmt_ratio))
            cells.append(self.wrong(key))
            out.append("| " + " | ".join(cells) + " |")
        return "\n".join(out) + "\n"


def summary(tables):
    """Every table side by side at a few sizes: arcomm's time and the peer's ratio."""
    when = fmt_when([d for t in tables for d in t.dates()])
    wheres = sorted({t.where()[1] for t in tables})
    runs = sorted({len(t.runs) for t in tables})
    out = [f"{when}, {'; '.join(wheres)}; {'-'.join(map(str, runs))} runs of each "
           f"command, medians over the runs (the ratio's lowest and highest in brackets):", ""]
    for t in tables:
        out.append(f"* **{t.name}**: {t.what()}: {t.where()[2]}")
    head, rule = ["size"], ["---:"]
    for t in tables:
        head.append(f"{t.name} µs")
        rule.append("---:")
        if t.peer:
            head.append(f"{PEER_NAMES.get(t.peer, t.peer)} / {t.name}")
            rule.append("---:")
    out += ["", "| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    sizes = sorted({k[1] for t in tables for k in t.keys})
    chosen = [s for s in SUMMARY_SIZES if s in sizes]
    for size in chosen if len(chosen) >= 3 else sizes:
        cells = [fmt_size(size)]
        for t in tables:
            keys = [k for k in t.keys if k[1] == size]
            if not keys:
                cells += [""] * (2 if t.peer else 1)
                continue
            key = keys[0]
            cells.append(fmt_us(statistics.median(t.stats(key, "arcomm", "time_us"))))
            if t.peer:
                ratios = [r["ratio"] for r in t.rows[key]]
                cell = fmt_ratio(statistics.median(ratios))
                if len(ratios) > 1:
                    cell += f" ({min(ratios):.2f}-{max(ratios):.2f})"
                cells.append(cell)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def replace_block(text, begin, end, body, path):
    pat = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if len(pat.findall(text)) > 1:
        raise SystemExit(f"perf_report: {path}: {begin} appears more than once")
    return pat.subn(lambda _: f"{begin}\n{body}{end}", text)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", nargs="+", action="append", metavar=("NAME", "FILE"), required=True,
                    help="a table: its name, then one arbench --json file a run")
    ap.add_argument("--write", action="append", default=[], metavar="PATH",
                    help="replace the marked blocks of PATH (see the module's text)")
    a = ap.parse_args(argv)
    tables = []
    for spec in a.run:
        if len(spec) < 2:
            ap.error(f"--run {spec[0]}: no JSON file")
        tables.append(Table(spec[0], spec[1:]))
    if not a.write:
        for t in tables:
            print(f"## {t.name}\n\n{t.markdown()}")
        print(f"## summary\n\n{summary(tables)}", end="")
        return 0
    for path in a.write:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        done = 0
        for t in tables:
            text, n = replace_block(text, f"<!-- perf:{t.name}:begin -->",
                                    f"<!-- perf:{t.name}:end -->", t.markdown(), path)
            done += n
        text, n = replace_block(text, "<!-- perf:begin -->", "<!-- perf:end -->",
                                summary(tables), path)
        done += n
        if not done:
            raise SystemExit(f"perf_report: {path} has no perf markers for these tables")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"perf_report: {path}: {done} block(s) written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
