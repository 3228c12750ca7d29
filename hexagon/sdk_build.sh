#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the DSP sources with a Qualcomm Hexagon SDK's compiler into a static library:
#   sdk_build.sh SDK_ROOT OUTPUT.a DSP_INCLUDE PARAMS_INCLUDE SOURCE...
# Untested: no SDK exists on the machines arcomm is developed on.  HEX_ARCH (default
# v73) picks the DSP version.
set -eu
sdk=$1; out=$2; inc1=$3; inc2=$4; shift 4
tools=$(ls -d "$sdk"/tools/HEXAGON_Tools/*/Tools/bin 2>/dev/null | sort | tail -n 1)
if [ -z "$tools" ] || [ ! -x "$tools/hexagon-clang" ]; then
    echo "sdk_build.sh: no tools/HEXAGON_Tools/*/Tools/bin/hexagon-clang under $sdk" >&2
    exit 1
fi
arch=${HEX_ARCH:-v73}
objs=""
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for src in "$@"; do
    obj="$dir/$(basename "$src" .c).o"
    "$tools/hexagon-clang" -m"$arch" -mhvx -mhvx-length=128B -O2 -fPIC -G0 -std=c11 \
        -I"$inc1" -I"$inc2" -c "$src" -o "$obj"
    objs="$objs $obj"
done
rm -f "$out"
# shellcheck disable=SC2086
"$tools/hexagon-ar" rcs "$out" $objs
