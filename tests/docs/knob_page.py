#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The knob page is the knob table.

docs/knobs.md holds a marker that the site build replaces with tables generated from
transports/base/knobs.h (docs/mkdocs/knobtable.py).  This test checks that the
generator reads the table as the library does: every knob the built arinfo reports
(arinfo --config --json, from the table compiled into it), in the same order, with the
same sub-table, type, default and doc, and nothing else; that the generated Markdown
names each of them; and that knobs.md keeps its marker and holds no hand-written copy.

    knob_page.py SOURCE_ROOT ARINFO
"""
import json
import os
import subprocess
import sys

root, arinfo = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "docs", "mkdocs"))
import hooks  # noqa: E402  (the marker the site build looks for)
import knobtable  # noqa: E402

TYPES = {"integer": "int", "size": "size", "boolean": "bool", "string": "string",
         "log level": "loglevel", "codec": "codec"}

env = {k: v for k, v in os.environ.items() if not k.startswith("ARCOMM_")}
out = subprocess.run([arinfo, "--config", "--json"], env=env, capture_output=True, text=True)
if out.returncode != 0:
    print(f"FAIL: {arinfo} --config --json exited {out.returncode}: {out.stderr}")
    sys.exit(1)
built = json.loads(out.stdout)["config"]
parsed = knobtable.parse(os.path.join(root, "transports", "base", "knobs.h"))

bad = []
names_built = [k["name"] for k in built]
names_parsed = [k["name"] for k in parsed]
if names_built != names_parsed:
    bad.append(f"knobs: arinfo reports {names_built}, the page would list {names_parsed}")
for b, p in zip(built, parsed):
    if b["name"] != p["name"]:
        continue
    for key, want, got in (("table", b["table"], p["group"]), ("type", b["type"], TYPES[p["type"]]),
                           ("default", b["default"], p["default"]), ("doc", b["doc"], p["doc"])):
        if want != got:
            bad.append(f"{b['name']}: {key} is {want!r} in arinfo, {got!r} on the page")

page = knobtable.knob_markdown(os.path.join(root, "transports", "base", "knobs.h"))
for name in names_built:
    if f"| `{name}` |" not in page:
        bad.append(f"{name}: no row in the generated tables")

md = open(os.path.join(root, "docs", "knobs.md"), encoding="utf-8").read()
if md.count(hooks.KNOB_MARKER) != 1:
    bad.append(f"docs/knobs.md must hold the marker line once: {hooks.KNOB_MARKER}")
for line in md.splitlines():
    first = line.split("|")[1] if line.startswith("|") else ""
    for name in names_built:
        if f"`{name}`" in first:
            bad.append(f"docs/knobs.md has a hand-written row for {name} (the table is generated)")

for b in bad:
    print("FAIL:", b)
if not bad:
    print(f"PASS: the knob page lists the {len(built)} knobs of the table as arinfo reads them")
sys.exit(1 if bad else 0)
