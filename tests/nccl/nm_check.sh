#!/bin/bash
# SPDX-License-Identifier: MIT
# libnccl.so.2's exports: only NCCL's names (nccl*, pnccl*), every one defined, each
# ncclX with its pncclX, every function nccl.h declares exported, nothing NCCL-named
# left undefined (it would fall through to another libnccl), and, where a real
# libnccl.so.2 is given and found, every NCCL function it defines defined here too.
#   nm_check.sh LIBNCCL NCCL_H [REAL_LIBNCCL]
set -u -o pipefail
lib=$1 header=$2 real=${3:-}
command -v nm >/dev/null || { echo "nm not found: skipped"; exit 77; }
bad=0
defined=$(nm -D --defined-only "$lib" | awk '{print $2, $3}')
others=$(echo "$defined" | awk '$2 !~ /^p?nccl/ {print $2}')
[ -z "$others" ] || { echo "FAIL: exports other than nccl*/pnccl*: $others"; bad=1; }
nottext=$(echo "$defined" | awk '$1 != "T" {print $2}')
[ -z "$nottext" ] || { echo "FAIL: not defined as functions: $nottext"; bad=1; }
names=$(echo "$defined" | awk '{print $2}' | sort)
for n in $(echo "$names" | grep '^nccl'); do
    grep -qx "p$n" <<<"$names" || { echo "FAIL: $n has no p$n"; bad=1; }
done
undef=$(nm -D --undefined-only "$lib" | awk '{print $2}' | grep '^p\?nccl' || true)
[ -z "$undef" ] || { echo "FAIL: NCCL names left undefined: $undef"; bad=1; }
declared=$(grep -oE '[ *]nccl[A-Za-z0-9]+\(' "$header" | grep -oE 'nccl[A-Za-z0-9]+' | sort -u)
for n in $declared; do
    grep -qx "$n" <<<"$names" || { echo "FAIL: nccl.h declares $n, the library lacks it"; bad=1; }
done
echo "$(echo "$names" | grep -c '^nccl') NCCL functions exported, $(echo "$declared" | wc -w) declared in nccl.h"
if [ -n "$real" ] && [ -e "$real" ]; then
    missing=0
    for n in $(nm -D --defined-only "$real" | awk '$2 == "T" || $2 == "W" {print $3}' \
               | grep '^p\?nccl' | grep -v 'Internal$' | sort -u); do
        grep -qx "$n" <<<"$names" || { echo "FAIL: $real defines $n, this library does not"; missing=1; }
    done
    [ $missing = 0 ] && echo "every NCCL function of $real is defined"
    [ $missing = 0 ] || bad=1
fi
[ $bad = 0 ] && echo PASS || echo FAIL
exit $bad
