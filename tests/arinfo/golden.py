#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs arinfo and compares its standard output with a golden file, line for line.

    golden.py --golden FILE [--subst KEY=VALUE]... [--env NAME=VALUE]... -- ARINFO ARGS...

The environment is cleaned of ARCOMM_* and HWLOC_* first, so that the knobs are at
their defaults and hwloc reads only the topology the arguments name, and COLUMNS is 80
(the width arinfo wraps its text to); --env adds variables back.  @KEY@ in the golden file stands for VALUE (the version, the build's
features): the golden does not change with them.  With ARINFO_REGEN_GOLDEN=1 in the
environment the golden file is rewritten from the output instead (check the diff).
"""
import argparse
import difflib
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--golden', required=True)
    ap.add_argument('--subst', action='append', default=[])
    ap.add_argument('--env', action='append', default=[])
    ap.add_argument('command', nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ['--'] else a.command
    if not cmd:
        ap.error('no arinfo command given')

    env = {k: v for k, v in os.environ.items()
           if not k.startswith('ARCOMM_') and not k.startswith('HWLOC_')}
    # The text is wrapped to COLUMNS (else the terminal's width): 80, whoever runs it.
    env['COLUMNS'] = '80'
    for kv in a.env:
        k, _, v = kv.partition('=')
        env[k] = v
    subs = [kv.partition('=')[::2] for kv in a.subst]

    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=50)
    out = p.stdout.decode('utf-8', 'replace')
    if p.returncode != 0 or p.stderr:
        sys.stderr.write(p.stderr.decode('utf-8', 'replace'))
        print(f'arinfo exited {p.returncode}' + (' and wrote to stderr' if p.stderr else ''))
        return 1

    if os.environ.get('ARINFO_REGEN_GOLDEN') == '1':
        # The build's values appear in the header line only, each in its place.
        places = {'VERSION': 'arcomm {} (', 'NUMA': 'libnuma {},', 'CUDA': 'CUDA {},',
                  'HEXAGON': 'Hexagon {}\n'}
        first, nl, rest = out.partition('\n')
        first += nl
        for k, v in subs:
            first = first.replace(places[k].format(v), places[k].format(f'@{k}@'))
        text = first + rest
        with open(a.golden, 'w') as f:
            f.write(text)
        print(f'rewrote {a.golden}')
        return 0

    with open(a.golden) as f:
        want = f.read()
    for k, v in subs:
        want = want.replace(f'@{k}@', v)
    if out == want:
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        want.splitlines(True), out.splitlines(True), a.golden, 'arinfo output'))
    print('\narinfo output differs from the golden file; if the change is intended, run the '
          'test with ARINFO_REGEN_GOLDEN=1 and review the diff')
    return 1


if __name__ == '__main__':
    sys.exit(main())
