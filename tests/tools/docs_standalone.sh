#!/bin/sh
# SPDX-License-Identifier: MIT
# The README and docs/ stand alone: no link out of the repository (http, ../shared),
# every repository path they name in backquotes or links exists, and the README still
# starts with the two commands.
#   docs_standalone.sh SOURCE_ROOT
set -u
cd "$1" || exit 1
bad=0
files="README.md $(ls docs/*.md)"

# shellcheck disable=SC2086
if grep -n -E 'https?://|\.\./shared' $files; then
    echo "FAIL: links out of the repository (above)"; bad=1
fi

# shellcheck disable=SC2086
for path in $(grep -o -h -E '(`|\()(README|LICENSE|CHANGELOG|docs|examples|tests|tools|include|runtime|collectives|transports|hexagon|cmake)(/[A-Za-z0-9_.-]+)*' $files |
    sed 's/^[`(]//' | sort -u); do
    case $path in
    *'<'* | *'*'*) continue ;;
    esac
    # A program named by its source: tests/cuda/diag_pcie is tests/cuda/diag_pcie.cu.
    [ -e "$path" ] || [ -e "$path.c" ] || [ -e "$path.cu" ] || [ -e "$path.md" ] ||
        { echo "FAIL: a doc names $path, which does not exist"; bad=1; }
done

[ "$(sed -n 3p README.md)" = "    bash tools/bench.sh    # fresh Debian 12, as root: installs, builds, runs the 2-rank host allreduce benchmark vs Open MPI" ] ||
    { echo "FAIL: README line 3 is not the bench.sh command"; bad=1; }
case "$(sed -n 4p README.md)" in
"    bash tools/test.sh "*) ;;
*) echo "FAIL: README line 4 is not the test.sh command"; bad=1 ;;
esac
grep -q '^## Quick start' README.md || { echo "FAIL: no Quick start section"; bad=1; }
# A front page, not a manual: the guide in docs/ holds the rest.
[ "$(wc -l < README.md)" -le 220 ] || { echo "FAIL: README.md is over 220 lines: move the detail into docs/"; bad=1; }
exit $bad
