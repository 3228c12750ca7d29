#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the user guide (docs/*.md) into a browsable site with MkDocs, warnings as
# errors (--strict: a broken link or a page missing from the nav fails the build).
#   bash tools/docs-site.sh [OUTDIR]     # default build/site; open OUTDIR/index.html
# Installs Debian's mkdocs package when it is missing and this runs as root; set
# ARCOMM_DOCS_NO_INSTALL=1 to exit 77 instead (what the test suite does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/site}

if ! command -v mkdocs >/dev/null 2>&1; then
    if [ "${ARCOMM_DOCS_NO_INSTALL:-0}" = 1 ]; then
        echo "docs-site: mkdocs is not installed (apt-get install mkdocs)" >&2
        exit 77
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "docs-site: mkdocs is not installed; as root: apt-get install mkdocs" >&2
        exit 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mkdocs >/dev/null
fi

case $out in /*) ;; *) out=$PWD/$out ;; esac
mkdir -p "$out"
# Debian's mkdocs runs on the system Python; keep a virtualenv's Python out of its way.
mkdocs build --strict --quiet --clean -f "$root/docs/mkdocs/mkdocs.yml" -d "$out"
echo "docs-site: $out/index.html"
