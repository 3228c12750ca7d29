#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what arcomm builds and tests with (Debian 12, as root) when it is missing.
#   tools/setup.sh                      the packages only (then build as README.md says)
#   tools/setup.sh BUILD [MESON ARGS]   also configures and builds a release tree in BUILD;
#                                       MESON ARGS (--prefix=..., -Dx=y) reach meson also
#                                       when BUILD was configured before.
# Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools and libraries: the build (meson, hwloc, libnuma, cmocka), the Open MPI peer of
# arbench, gnuplot for its plots, python3 for the JSON tests, the Hexagon cross
# toolchain plus qemu for the DSP-side tests, clang-format for the style check, cmake
# for the install test (find_package(arcomm) against the installed tree), numpy, pytest
# and mpi4py for the Python package's tests (tests/python) and mpi4py's own suite, pip
# to fetch that suite, venv for README.md's quick start (and its test, suite install),
# meson-python and patchelf for pip install . (the wheel with libarcomm; suite install),
# mkdocs for the guide's site (suite docs), help2man, pandoc, groff and man-db for the man
# pages and their test.
pkgs=(build-essential meson ninja-build pkg-config libhwloc-dev hwloc libnuma-dev
      libcmocka-dev openmpi-bin libopenmpi-dev gnuplot-nox python3 clang lld
      qemu-user-static clang-format cmake python3-numpy python3-pytest python3-mpi4py
      python3-pip python3-venv python3-mesonpy patchelf mkdocs help2man pandoc groff man-db)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${missing[*]}: run tools/setup.sh as root (or apt-get install them)" >&2
    exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc is not on PATH by default where the CUDA toolkit lives in /usr/local/cuda.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi

if [ $# -eq 0 ]; then
    echo "setup: the packages are installed; build and install as README.md's quick start says" >&2
    exit 0
fi
build=$1
shift
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --buildtype=release "$@" >/dev/null
elif [ $# -gt 0 ]; then
    # A tree configured before takes the arguments of this run (meson setup alone would
    # say "Directory already configured" and keep the old prefix).
    meson setup --reconfigure "$build" "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
echo "setup: built $build" >&2
