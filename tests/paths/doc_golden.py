#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that an arinfo example shown in a page of docs/ is the golden file a test runs.

    doc_golden.py PAGE COMMAND GOLDEN [KEY=VALUE]...

PAGE's indented block whose first line is "$ COMMAND" must be, line for line, the golden
file with @KEY@ replaced by VALUE (the version, the build's features).
"""
import sys


def block(page, command):
    lines = open(page).read().split('\n')
    want = '    $ ' + command
    for i, line in enumerate(lines):
        if line == want:
            out = []
            for line in lines[i + 1:]:
                if line.startswith('    ') or (line == '' and out and out[-1] is not None):
                    out.append(line[4:])
                else:
                    break
            while out and out[-1] == '':
                out.pop()
            return out
    return None


def main():
    page, command, golden = sys.argv[1:4]
    got = block(page, command)
    if got is None:
        print(f'{page}: no block "    $ {command}"')
        return 1
    want = open(golden).read()
    for kv in sys.argv[4:]:
        k, _, v = kv.partition('=')
        want = want.replace(f'@{k}@', v)
    want = want.rstrip('\n').split('\n')
    if got == want:
        return 0
    print(f'{page}: the example of "{command}" is not {golden}:')
    for i in range(max(len(got), len(want))):
        a = got[i] if i < len(got) else '<none>'
        b = want[i] if i < len(want) else '<none>'
        if a != b:
            print(f'  line {i + 1}: page "{a}"\n          golden "{b}"')
    return 1


if __name__ == '__main__':
    sys.exit(main())
