#!/bin/bash
# SPDX-License-Identifier: MIT
# Fills DIR (default .deps, in the project's root) with the Debian packages that the
# GPU machine lacks (hwloc, libnuma, cmocka, their -dev parts) and with unpack.sh,
# which installs them there under /opt/deps. Ignore DIR in git, name it in `carry`.
set -euo pipefail
dir=${1:-.deps}
mkdir -p "$dir"
cd "$dir"
apt-get download libhwloc15 libhwloc-dev libnuma1 libnuma-dev libcmocka0 libcmocka-dev \
                 libltdl7 libltdl-dev >/dev/null 2>&1 || {
  apt-get update -qq && apt-get download libhwloc15 libhwloc-dev libnuma1 libnuma-dev \
                 libcmocka0 libcmocka-dev libltdl7 libltdl-dev; }
cat > unpack.sh <<'UNPACK'
#!/bin/bash
# On the GPU machine: unpack the .deb files beside this script into /opt/deps and print
# the environment to use:  eval "$(bash .deps/unpack.sh)"
set -e
here=$(cd "$(dirname "$0")" && pwd)
for f in "$here"/*.deb; do dpkg -x "$f" /opt/deps; done
lib=/opt/deps/usr/lib/x86_64-linux-gnu
sed -i 's#^prefix=.*#prefix=/opt/deps/usr#' "$lib"/pkgconfig/*.pc
echo "export PKG_CONFIG_PATH=$lib/pkgconfig:\${PKG_CONFIG_PATH:-}"
echo "export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}"
echo "export CPATH=/opt/deps/usr/include:\${CPATH:-}"
UNPACK
chmod +x unpack.sh
ls
