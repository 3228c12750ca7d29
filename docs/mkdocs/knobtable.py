#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The knob reference, generated from the knob table (transports/base/knobs.h).

The table is the one source: every ARCOMM_* knob is an X(id, type, default, field, min,
max, flags, doc) entry of a RT_KNOBS_<GROUP>(X) macro.  This module parses those
entries (the site build's hook calls knob_markdown(); the docs test calls main() with
--json to compare the entries with what the built arinfo reports).

    knobtable.py KNOBS_H [--json]
"""
import json
import re
import sys

GROUPS = [
    ("COMMON", "common", "Every communicator"),
    ("HOST", "host", "Host paths and the shared-memory segment"),
    ("CUDA", "cuda", "CUDA GPUs"),
    ("HEX", "hexagon", "Hexagon sessions"),
]

TYPES = {
    "RT_KNOB_INT": "integer",
    "RT_KNOB_SIZE": "size",
    "RT_KNOB_BOOL": "boolean",
    "RT_KNOB_STRING": "string",
    "RT_KNOB_LOGLEVEL": "log level",
    "RT_KNOB_CODEC": "codec",
}


def _macro_body(text, name):
    """The body of '#define name(X) ...', continuation lines joined."""
    m = re.search(r"^#define\s+" + re.escape(name) + r"\(X\)((?:.*\\\n)*.*)$", text, re.M)
    if not m:
        raise ValueError(f"knobs.h has no #define {name}(X)")
    return m.group(1).replace("\\\n", " ")


def _split_args(s):
    """Splits the text inside X( ... ) at top-level commas, keeping string literals whole."""
    args, depth, cur, i = [], 0, "", 0
    while i < len(s):
        c = s[i]
        if c == '"':
            j = i + 1
            while s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            cur += s[i : j + 1]
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    args.append(cur.strip())
    return args


def _entries(body):
    """Yields the argument lists of every X(...) in a macro body."""
    i = 0
    while True:
        i = body.find("X(", i)
        if i < 0:
            return
        depth, j = 0, i + 1
        while True:
            c = body[j]
            if c == '"':
                j += 1
                while body[j] != '"':
                    j += 2 if body[j] == "\\" else 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield _split_args(body[i + 2 : j])
        i = j + 1


def _strings(expr):
    """The concatenation of the C string literals in expr."""
    return "".join(bytes(s, "utf-8").decode("unicode_escape") for s in re.findall(r'"((?:[^"\\]|\\.)*)"', expr))


def _number(expr, defines):
    if expr in ("RT_KNOB_NOMIN", "RT_KNOB_NOMAX"):
        return None
    expr = defines.get(expr, expr)
    if not re.fullmatch(r"[0-9\s<()+\-*]+", expr):
        raise ValueError(f"knobs.h: cannot read the bound {expr!r}")
    return int(eval(expr))  # digits, shifts and arithmetic only, checked above


def parse(path):
    text = open(path, encoding="utf-8").read()
    defines = dict(re.findall(r"^#define\s+(RT_KNOB_[A-Z_]+)\s+([0-9][0-9 <]*)$", text, re.M))
    knobs = []
    for macro, group, _title in GROUPS:
        for a in _entries(_macro_body(text, "RT_KNOBS_" + macro)):
            if len(a) != 8:
                raise ValueError(f"knobs.h: an entry of RT_KNOBS_{macro} has {len(a)} fields: {a}")
            ident, typ, default, _field, lo, hi, flags, doc = a
            ktype = TYPES[typ]
            numeric = ktype in ("integer", "size")
            knobs.append({
                "name": "ARCOMM_" + ident,
                "group": group,
                "type": ktype,
                "default": _strings(default),
                "min": _number(lo, defines) if numeric else None,
                "max": _number(hi, defines) if numeric else None,
                "agree": "RT_KNOB_AGREE" in flags,
                "no_off": "RT_KNOB_NO_OFF" in flags,
                "no_auto": "RT_KNOB_NO_AUTO" in flags,
                "doc": _strings(doc),
            })
    return knobs


def _size_text(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def _accepts(k):
    """What values the knob takes, as the parser reads them."""
    if k["type"] == "log level":
        return "`none` `error` `warn` `info` `debug` `trace`"
    if k["type"] == "boolean":
        return "`0`/`1`, `no`/`yes`, `off`/`on`, `false`/`true`"
    if k["type"] == "string":
        return "text"
    fmt = _size_text if k["type"] == "size" else str
    lo, hi = k["min"], k["max"]
    if lo is None and hi is None:
        rng = "any number"
    elif hi is None:
        rng = f"≥ {fmt(lo)}"
    elif lo is None:
        rng = f"≤ {fmt(hi)}"
    else:
        rng = f"{fmt(lo)} to {fmt(hi)}"
    if k["type"] == "size":
        words = [w for w, refused in (("`off`", k["no_off"]), ("`auto`", k["no_auto"])) if not refused]
        rng = "bytes, " + rng + (", or " + " ".join(words) if words else "")
    return rng


def _cell(text):
    return text.replace("|", "\\|")


def knob_markdown(path):
    """The knob tables, one per sub-table of knobs.h, as Markdown."""
    knobs = parse(path)
    out = []
    for _macro, group, title in GROUPS:
        out.append(f"### {title} (`{group}`)\n")
        out.append("| knob | default | accepts | across ranks | what it does |")
        out.append("|---|---|---|---|---|")
        for k in (k for k in knobs if k["group"] == group):
            default = f"`{k['default']}`" if k["default"] else "(empty)"
            agree = "**must agree**" if k["agree"] else "may differ"
            out.append(f"| `{k['name']}` | {default} | {_accepts(k)} | {agree} | {_cell(k['doc'])} |")
        out.append("")
    return "\n".join(out)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    if "--json" in argv[2:]:
        json.dump(parse(argv[1]), sys.stdout, indent=1)
        print()
    else:
        print(knob_markdown(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
