#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The README's and the guide's examples are the tested programs.

A fenced code block right after a line <!-- example: PATH --> must be PATH's text, whole
or a verbatim excerpt (PATH is a program the test suite builds and runs, or a test
itself).  A C block that holds a main() must carry such a marker: a whole program in the
guide is never an untested copy.

    doc_examples.py SOURCE_ROOT
"""
import glob
import os
import re
import sys

root = sys.argv[1]
bad, checked = [], 0
for md in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
    name = os.path.relpath(md, root)
    lines = open(md, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = re.fullmatch(r"<!-- example: (\S+) -->", lines[i].strip())
        fence = re.match(r"^(```+|~~~+)(\w*)", lines[i])
        if m:
            path = os.path.join(root, m.group(1))
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines) or not lines[j].startswith("```"):
                bad.append(f"{name}:{i + 1}: the example marker is not followed by a code block")
                i += 1
                continue
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            block = "\n".join(lines[j + 1 : k]).strip("\n")
            if not os.path.exists(path):
                bad.append(f"{name}:{i + 1}: {m.group(1)} does not exist")
            elif block not in open(path, encoding="utf-8").read():
                bad.append(f"{name}:{i + 1}: the block is not {m.group(1)}'s text (copy it again)")
            checked += 1
            i = k + 1
            continue
        if fence:
            k = i + 1
            while k < len(lines) and not lines[k].startswith(fence.group(1)):
                k += 1
            block = "\n".join(lines[i + 1 : k])
            if fence.group(2) in ("c", "cpp", "cuda") and re.search(r"\bint main\(", block):
                bad.append(f"{name}:{i + 1}: a whole C program without <!-- example: PATH -->")
            i = k + 1
            continue
        i += 1

for b in bad:
    print("FAIL:", b)
if not bad:
    print(f"PASS: {checked} examples in docs/ are the text of the programs the tests run")
sys.exit(1 if bad else 0)
