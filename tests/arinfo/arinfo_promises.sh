#!/bin/sh
# SPDX-License-Identifier: MIT
# What arinfo says must hold: -n above COMM_MAX_RANKS (what comm_init refuses) is a
# usage error, not a transport that "would serve" it; a topology file hwloc cannot load
# fails (also when only the paths are asked for) with a message that says what failed,
# never "Success".
#   arinfo_promises.sh ARINFO
set -u
arinfo=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/arinfo-promises.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
bad=0

"$arinfo" -n 300 --only transports >"$dir/out" 2>"$dir/err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "at most 256 ranks" "$dir/err"; then
    echo "-n 300: exit $rc (expected 2 and 'at most 256 ranks'):"; cat "$dir/out" "$dir/err"; bad=1
fi
"$arinfo" -n 256 --only transports >"$dir/out" 2>"$dir/err" || {
    echo "-n 256 (the limit itself) failed:"; cat "$dir/err"; bad=1; }

: >"$dir/empty.xml"
echo 'not xml at all' >"$dir/garbage.xml"
echo '<?xml version="1.0"?><notatopology/>' >"$dir/other.xml"
for f in empty garbage other missing; do
    for only in topology paths config,paths; do
        "$arinfo" --topology "$dir/$f.xml" --only "$only" >"$dir/out" 2>"$dir/err"
        rc=$?
        if [ $rc -ne 1 ]; then
            echo "--topology $f.xml --only $only: exit $rc, expected 1"; bad=1
        fi
        if grep -q "Success" "$dir/err" || ! grep -q "$dir/$f.xml" "$dir/err"; then
            echo "--topology $f.xml --only $only: the message must name the file, not 'Success':"
            cat "$dir/err"; bad=1
        fi
    done
done
"$arinfo" --topology "$dir/other.xml" --only topology 2>&1 | grep -q "lstopo" || {
    echo "a file hwloc does not read: the message does not say what to give instead"; bad=1; }
exit $bad
