#!/bin/sh
# SPDX-License-Identifier: MIT
# The guide builds into a site with no warning (mkdocs --strict: pages, nav, links), and
# every link between its pages, to a page or a section of one, leads somewhere.
# Skipped (77) where mkdocs is not installed (Debian: apt-get install mkdocs).
#   site.sh SOURCE_ROOT OUTDIR
set -u
root=$1 out=$2
ARCOMM_DOCS_NO_INSTALL=1 bash "$root/tools/docs-site.sh" "$out" || exit $?
exec python3 "$root/tests/docs/check_links.py" "$out"
