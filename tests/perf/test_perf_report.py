#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/perf-report/perf_report.py on real arbench runs.

    test_perf_report.py ARBENCH PERF_REPORT

Runs arbench twice (2 thread ranks, 4 B to 1 KiB, checked, --json), writes the table
and the summary into a scratch markdown file between their markers, and checks that
the table has one row per size of the JSON, each with the size, the median and the
spread of the runs' times, their busbw and wrong counts; that the text around the
markers is kept; that a second write gives the same file.  Exit 77 never: arbench is
part of the build.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

arbench, script = sys.argv[1], sys.argv[2]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def close(cell, value):
    """cell shows value rounded: within half a unit of its last digit."""
    digits = len(cell.split(".")[1]) if "." in cell else 0
    return abs(float(cell) - value) <= 0.5 * 10 ** -digits + 1e-9


def size_label(n):
    return f"{n >> 10} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


with tempfile.TemporaryDirectory(prefix="perf-report-") as tmp:
    runs = []
    for i in range(2):
        path = os.path.join(tmp, f"run{i}.json")
        subprocess.run([arbench, "-n", "2", "-b", "4", "-e", "1K", "-f", "4", "--check",
                        "--iters", "200", "--json", path], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            runs.append(json.load(f))
    doc = os.path.join(tmp, "doc.md")
    before = "# Title\n\nText before.\n\n<!-- perf:threads:begin -->\nold table\n" \
             "<!-- perf:threads:end -->\n\nBetween.\n\n<!-- perf:other:begin -->\nkept\n" \
             "<!-- perf:other:end -->\n<!-- perf:begin -->\n<!-- perf:end -->\nAfter.\n"
    with open(doc, "w") as f:
        f.write(before)
    cmd = [sys.executable, script, "--run", "threads"] + \
        [os.path.join(tmp, f"run{i}.json") for i in range(2)] + ["--write", doc]
    subprocess.run(cmd, check=True)
    with open(doc) as f:
        text = f.read()
    print(text)

    # The text outside the blocks, and the block of a table not given, are kept.
    outside = re.sub(r"(<!-- perf:threads:begin -->\n).*?(<!-- perf:threads:end -->)",
                     r"\1\2", text, flags=re.S)
    outside = re.sub(r"(<!-- perf:begin -->\n).*?(<!-- perf:end -->)", r"\1\2", outside,
                     flags=re.S)
    check(outside == before.replace("old table\n", ""), "text outside the markers changed")

    block = re.search(r"<!-- perf:threads:begin -->\n(.*?)<!-- perf:threads:end -->", text,
                      re.S).group(1)
    command = re.sub(r" --json \S+", "", runs[0]["command"])
    check(f"`{command}`" in block, "the table does not name the command without --json")
    check(runs[0]["date"][:10] in block, "the table does not give the date")
    check(runs[0]["machine"]["cpu"] in block, "the table does not name the cpu")
    check("2 runs" in block, "the table does not say how many runs")

    rows = [line for line in block.splitlines() if re.match(r"\| \d+ (B|KiB) \|", line)]
    sizes = [r["size"] for r in runs[0]["rows"]]
    check(len(rows) == len(sizes), f"{len(rows)} table rows for {len(sizes)} sizes")
    for line, size in zip(rows, sizes):
        cells = [c.strip() for c in line.strip("|").split("|")]
        check(cells[0] == size_label(size), f"row {cells[0]!r} for size {size}")
        for col, field in ((1, "time_us"), (2, "busbw_gbs")):
            vals = [next(r[ "arcomm"][field] for r in run["rows"] if r["size"] == size)
                    for run in runs]
            m = re.fullmatch(r"([\d.]+)(?: \(([\d.]+)-([\d.]+)\))?", cells[col])
            check(m is not None, f"{size} B: cell {cells[col]!r}")
            if not m:
                continue
            check(close(m.group(1), statistics.median(vals)),
                  f"{size} B {field}: {m.group(1)} is not the median of {vals}")
            if m.group(2):
                check(close(m.group(2), min(vals)) and close(m.group(3), max(vals)),
                      f"{size} B {field}: spread {m.group(2)}-{m.group(3)} for {vals}")
        wrong = sum(next(r["arcomm"]["wrong"] for r in run["rows"] if r["size"] == size)
                    for run in runs)
        check(cells[-1] == str(wrong), f"{size} B: wrong {cells[-1]} for {wrong}")

    summary = re.search(r"<!-- perf:begin -->\n(.*?)<!-- perf:end -->", text, re.S).group(1)
    check("**threads**" in summary and f"`{command}`" in summary,
          "the summary does not name the table and its command")

    # Idempotent: a second write changes nothing.
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(doc) as f:
        check(f.read() == text, "a second write changed the file")

    # A file without markers is an error, and is left alone.
    bare = os.path.join(tmp, "bare.md")
    with open(bare, "w") as f:
        f.write("no markers\n")
    r = subprocess.run(cmd[:-1] + [bare], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    check(r.returncode != 0 and b"no perf markers" in r.stderr, "no error for a file without markers")

print("FAILED: %d" % len(fails) if fails else "ok")
sys.exit(1 if fails else 0)
