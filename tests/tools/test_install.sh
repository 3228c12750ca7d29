#!/bin/sh
# SPDX-License-Identifier: MIT
# The installed tree works on first contact: `meson install --destdir` of this build,
# then, without LD_LIBRARY_PATH, the installed arrun, arinfo and arbench run (their
# RUNPATH finds libarcomm), arbench-mpi is in libexec and not in bin, and a program
# built against the tree with pkg-config and with CMake (find_package(arcomm),
# arcomm::arcomm) runs two thread ranks.  The staged tree is used where it lies, as a
# moved one would be: pkg-config's flags point into it (relocatable .pc files, no
# PKG_CONFIG_SYSROOT_DIR), and the CMake components mpi and nccl (arcomm::mpi,
# arcomm::nccl) build and run programs where the build made their libraries.
#   test_install.sh MESON BUILD_ROOT SOURCE_ROOT VERSION SANITIZE
set -u
meson=$1 build=$2 src=$3 version=$4 sanitize=$5
dir=$(mktemp -d "${TMPDIR:-/tmp}/arcomm-install.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
unset LD_LIBRARY_PATH
bad=0
fail() { echo "FAIL: $*"; bad=1; }

"$meson" install -C "$build" --destdir "$dir/root" --no-rebuild --quiet >"$dir/install.log" 2>&1 || {
    cat "$dir/install.log"; echo "FAIL: meson install"; exit 1; }

bin=$(find "$dir/root" -path '*/bin/arrun' | head -n 1)
[ -n "$bin" ] || { echo "FAIL: no bin/arrun installed"; find "$dir/root"; exit 1; }
bindir=$(dirname "$bin")
prefix=$(dirname "$bindir")
pc=$(find "$prefix" -name arcomm.pc | head -n 1)
cmakedir=$(find "$prefix" -path '*/cmake/arcomm' -type d | head -n 1)
libdir=$(dirname "$(find "$prefix" -name 'libarcomm.so.*' | head -n 1)")

for tool in arrun arinfo arbench; do
    out=$("$bindir/$tool" --version 2>&1)
    case "$out" in
    "$tool $version (libarcomm $version)") ;;
    *) fail "installed $tool --version: $out" ;;
    esac
done
[ -e "$bindir/arbench-mpi" ] && fail "arbench-mpi (an internal helper) is installed in bin/"
if [ -e "$build/tools/arbench/arbench-mpi" ]; then
    mpi=$(find "$prefix" -path '*/libexec/arcomm/arbench-mpi' | head -n 1)
    [ -n "$mpi" ] || fail "arbench-mpi is not in libexec/arcomm"
fi
[ -f "$prefix/share/doc/arcomm/LICENSE" ] || fail "no LICENSE in share/doc/arcomm"

# The library's own dependencies as a sanitizer build has them: the program must carry
# the same runtime, else the sanitized libarcomm refuses to load.
cflags=
[ "$sanitize" != none ] && cflags="-fsanitize=$sanitize"

# pkg-config: the .pc files are relocatable, every path relative to where they lie.  A
# build directory configured before that became the default keeps its old setting.
# shellcheck disable=SC2016 # the literal ${pcfiledir}
grep -q '^prefix=${pcfiledir}' "$pc" || fail "arcomm.pc is not relocatable ($(grep '^prefix=' "$pc")): \
was $build configured before pkgconfig.relocatable=true became the default? \
meson configure $build -Dpkgconfig.relocatable=true"
if command -v pkg-config >/dev/null 2>&1 && command -v cc >/dev/null 2>&1; then
    flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs arcomm) ||
        fail "pkg-config --cflags --libs arcomm"
    case " $flags " in
    *" -pthread "*) ;;
    *) fail "arcomm.pc has no -pthread: $flags" ;;
    esac
    for f in $flags; do
        case $f in
        -I"$dir/root"/* | -L"$dir/root"/*) ;;
        -I* | -L*) fail "pkg-config names $f, outside the staged tree $dir/root" ;;
        esac
    done
    for other in arcomm-mpi arcomm-nccl; do
        [ -f "$(dirname "$pc")/$other.pc" ] || continue
        # shellcheck disable=SC2016 # the literal ${pcfiledir}
        grep -q '^prefix=${pcfiledir}' "$(dirname "$pc")/$other.pc" ||
            fail "$other.pc is not relocatable: $(grep '^prefix=' "$(dirname "$pc")/$other.pc")"
    done
    # shellcheck disable=SC2086
    cc $cflags -o "$dir/pc-example" "$src/tests/examples/installed/version_allreduce.c" $flags \
        >"$dir/cc.log" 2>&1 || { cat "$dir/cc.log"; fail "building with pkg-config"; }
    if [ -x "$dir/pc-example" ]; then
        out=$(LD_LIBRARY_PATH=$libdir ARCOMM_LOG_LEVEL=error "$dir/pc-example" 2>&1)
        [ "$out" = "ok $version" ] || fail "the pkg-config program: $out"
    fi
else
    echo "pkg-config or cc missing: the pkg-config part is not checked"
fi

if command -v cmake >/dev/null 2>&1; then
    want=$(echo "$version" | cut -d. -f1,2)
    cmake -S "$src/tests/examples/installed" -B "$dir/cmake-build" \
        -DCMAKE_PREFIX_PATH="$prefix" -DARCOMM_WANT_VERSION="$want" \
        -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$cflags" \
        >"$dir/cmake.log" 2>&1 && cmake --build "$dir/cmake-build" >>"$dir/cmake.log" 2>&1 ||
        { cat "$dir/cmake.log"; fail "building with CMake (find_package(arcomm))"; }
    if [ -x "$dir/cmake-build/version_allreduce" ]; then
        # CMake gives the program a RUNPATH to the imported library: no LD_LIBRARY_PATH.
        out=$(ARCOMM_LOG_LEVEL=error "$dir/cmake-build/version_allreduce" 2>&1)
        [ "$out" = "ok $version" ] || fail "the CMake program: $out"
    fi
    # A version the tree is not: find_package must refuse it.
    cmake -S "$src/tests/examples/installed" -B "$dir/cmake-bad" \
        -DCMAKE_PREFIX_PATH="$prefix" -DARCOMM_WANT_VERSION=99.0 >"$dir/cmake-bad.log" 2>&1 &&
        fail "find_package(arcomm 99.0) accepted version $version"
    [ -n "$cmakedir" ] || fail "no cmake/arcomm directory installed"
    # A component arcomm does not have: find_package must refuse it.
    cmake -S "$src/tests/install/cmake_components" -B "$dir/cmake-nosuch" \
        -DCMAKE_PREFIX_PATH="$prefix" -DARCOMM_COMPONENT=nosuch >"$dir/cmake-nosuch.log" 2>&1 &&
        fail "find_package(arcomm COMPONENTS nosuch) succeeded"
    # arcomm::mpi and arcomm::nccl, where the build made them.
    for comp in mpi nccl; do
        case $comp in
        mpi) have=$(find "$prefix" -name 'libarcomm_mpi.so.*' | head -n 1) want="mpi $version" ;;
        nccl) have=$(find "$prefix" -path '*/arcomm-nccl/libnccl.so.2' | head -n 1) want="nccl 21903" ;;
        esac
        if [ -z "$have" ]; then
            cmake -S "$src/tests/install/cmake_components" -B "$dir/cmake-$comp" \
                -DCMAKE_PREFIX_PATH="$prefix" -DARCOMM_COMPONENT=$comp >"$dir/cmake-$comp.log" 2>&1 &&
                fail "find_package(arcomm COMPONENTS $comp) succeeded without its library"
            continue
        fi
        cmake -S "$src/tests/install/cmake_components" -B "$dir/cmake-$comp" \
            -DCMAKE_PREFIX_PATH="$prefix" -DARCOMM_COMPONENT=$comp \
            -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$cflags" \
            >"$dir/cmake-$comp.log" 2>&1 && cmake --build "$dir/cmake-$comp" >>"$dir/cmake-$comp.log" 2>&1 ||
            { cat "$dir/cmake-$comp.log"; fail "building with CMake on arcomm::$comp"; continue; }
        out=$(ARCOMM_LOG_LEVEL=error "$dir/cmake-$comp/component" 2>&1)
        [ "$out" = "$want" ] || fail "the arcomm::$comp program: $out (want $want)"
        echo "arcomm::$comp: the program built on it printed: $out"
    done
else
    echo "cmake missing (tools/setup.sh installs it): the CMake part is not checked"
    [ $bad -eq 0 ] && exit 77
fi
exit $bad
