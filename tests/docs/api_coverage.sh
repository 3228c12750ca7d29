#!/bin/sh
# SPDX-License-Identifier: MIT
# Every function a public library exports, and every function the public headers
# declare, has its own section ("### `name`") in docs/api.md, the C API reference.
# Exported symbols that are not API are named in runtime/rt_hooks.h (ARCOMM_HOOK).
#   api_coverage.sh SOURCE_ROOT LIBRARY...
set -u
root=$1
shift
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm (binutils) not found"; exit 77; }
ref=$root/docs/api.md
bad=0
documented() { grep -q "^### \`$1\`\$" "$ref"; }

for lib in "$@"; do
    syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWiV]$/ { print $3 }' | sed 's/@.*//' | sort -u)
    [ -n "$syms" ] || { echo "FAIL: nm found no exported function in $lib"; bad=1; continue; }
    n=0
    for s in $syms; do
        case $s in
        _init | _fini) continue ;;
        esac
        n=$((n + 1))
        if documented "$s"; then
            continue
        fi
        if grep -q "^ARCOMM_HOOK .*\b$s(" "$root/runtime/rt_hooks.h"; then
            continue
        fi
        echo "FAIL: $(basename "$lib") exports $s, which docs/api.md does not document (### \`$s\`)"
        bad=1
    done
    echo "$(basename "$lib"): $n exported functions checked"
done

# The headers' functions (an inline one or a macro would not show in nm).
for h in "$root/include/arcomm.h" "$root/include/arcomm_mpi.h" "$root/include/arcomm_paths.h"; do
    for f in $(grep -o -E '^[a-z_ ]+[ *]comm_[a-z_]+\(' "$h" | grep -o -E 'comm_[a-z_]+'); do
        documented "$f" || { echo "FAIL: $(basename "$h") declares $f, which docs/api.md does not document"; bad=1; }
    done
done
[ $bad = 0 ] && echo "PASS: every exported and declared function is documented in docs/api.md"
exit $bad
