#!/bin/sh
# SPDX-License-Identifier: MIT
# The man pages the build generated (help2man, pandoc): each renders, has its NAME with
# the name and a one-line description, and a SYNOPSIS; then, installed into a staged
# prefix (meson install --tags man --destdir), man finds each by name.
#
#   man_pages.sh MESON BUILD_DIR PREFIX MANDIR PAGE...
#
# Exit 77 (skip) when a page was not generated (help2man or pandoc absent) or man and
# groff are both absent.
meson=$1 build=$2 prefix=$3 mandir=$4
shift 4
if [ $# = 0 ]; then
    echo "no man page was generated (help2man and pandoc absent): skipped"; exit 77
fi
if command -v man >/dev/null 2>&1; then
    # Justified text: runs of blanks squeezed to one, for the checks below.
    render() { MANWIDTH=80 man -l -P cat "$1" 2>/dev/null | tr -s ' '; }
elif command -v groff >/dev/null 2>&1; then
    render() { groff -man -Tutf8 "$1" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | tr -s ' '; }
else
    echo "neither man nor groff: skipped"; exit 77
fi
bad=0
for page in "$@"; do
    if [ ! -f "$page" ]; then
        echo "$page was not generated (help2man or pandoc absent): skipped"; exit 77
    fi
    name=$(basename "$page"); name=${name%.*}
    text=$(render "$page")
    if [ -z "$text" ]; then
        echo "$page: renders to nothing"; bad=1; continue
    fi
    for sect in NAME SYNOPSIS DESCRIPTION; do
        printf '%s\n' "$text" | grep -q "^$sect\$" || { echo "$page: no $sect section"; bad=1; }
    done
    # NAME: "arrun - start the ranks ...", the line after the heading.
    line=$(printf '%s\n' "$text" | sed -n '/^NAME$/{n;p;q}')
    case "$line" in
        *"$name - "?*) ;;
        *) echo "$page: NAME line is '$line', not '$name - description'"; bad=1 ;;
    esac
    # SYNOPSIS names the program (its first line after the heading).
    line=$(printf '%s\n' "$text" | sed -n '/^SYNOPSIS$/{n;p;q}')
    case "$line" in
        *"$name"*|*"#include <$name.h>"*) ;;
        *) echo "$page: SYNOPSIS starts '$line', without $name"; bad=1 ;;
    esac
done

# "man arrun" after an install: the pages alone, into a staged prefix of our own.
stage=$(mktemp -d "${TMPDIR:-/tmp}/arcomm-man.XXXXXX") || exit 1
trap 'rm -rf "$stage"' EXIT
if ! "$meson" install -C "$build" --no-rebuild --tags man --destdir "$stage" >"$stage.log" 2>&1; then
    echo "meson install --tags man failed:"; cat "$stage.log"; rm -f "$stage.log"; exit 1
fi
rm -f "$stage.log"
case "$mandir" in /*) manpath=$stage$mandir ;; *) manpath=$stage$prefix/$mandir ;; esac
if command -v man >/dev/null 2>&1; then
    for page in "$@"; do
        file=$(basename "$page"); name=${file%.*}; sect=${file##*.}
        found=$(MANPATH=$manpath man -w "$sect" "$name" 2>/dev/null)
        case "$found" in
            "$manpath/man$sect/$file"*) ;;
            *) echo "man -w $sect $name: '$found', not under $manpath/man$sect"; bad=1 ;;
        esac
    done
fi
[ $bad = 0 ] && echo "ok: $# man pages"
exit $bad
