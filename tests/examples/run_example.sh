#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs one example of examples/ as its header says to run it, and checks what it printed.
#   run_example.sh [--python PYTHON MODULE] [--always COUNT REGEX]... [--expect COUNT REGEX]...
#                  -- COMMAND [ARGS...]
# --expect: after a run that exited 0, exactly COUNT lines of the output match the
# extended REGEX.  --always: the same check, made even when the example exited 77
# (skipped: no GPU), for what it prints before it looks for one.  --python: exit 77
# (skipped) where PYTHON cannot import MODULE.  A non-zero exit other than 77 fails.
set -uo pipefail
checks=() always=() py=()
while [ $# -gt 0 ]; do
    case $1 in
    --expect) checks+=("$2" "$3"); shift 3 ;;
    --always) always+=("$2" "$3"); shift 3 ;;
    --python) py+=("$2" "$3"); shift 3 ;;
    --) shift; break ;;
    *) echo "run_example.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
for ((i = 0; i < ${#py[@]}; i += 2)); do
    if ! "${py[i]}" -c "import ${py[i + 1]}" 2>/dev/null; then
        echo "${py[i]} has no ${py[i + 1]}: skipped"
        exit 77
    fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
timeout 120 "$@" >"$out" 2>&1 || rc=$?
cat "$out"
fails=0
check() { # count regex
    local n
    n=$(grep -cE -- "$2" "$out")
    if [ "$n" -ne "$1" ]; then
        echo "FAIL: $n lines match '$2', want $1"
        fails=$((fails + 1))
    fi
}
for ((i = 0; i < ${#always[@]}; i += 2)); do
    check "${always[i]}" "${always[i + 1]}"
done
if [ $rc -eq 77 ]; then
    [ $fails -eq 0 ] || exit 1
    echo "skipped (exit 77)"
    exit 77
fi
if [ $rc -ne 0 ]; then
    echo "FAIL: $* exited $rc"
    exit 1
fi
for ((i = 0; i < ${#checks[@]}; i += 2)); do
    check "${checks[i]}" "${checks[i + 1]}"
done
[ $fails -eq 0 ] || exit 1
echo "ok"
