#!/bin/bash
# SPDX-License-Identifier: MIT
# pip install . from the root of the source tree: meson-python (pyproject.toml) builds
# libarcomm and puts it in the wheel, and the package loads that copy.  Runs in a fresh
# copy of the tree (git's files), in a venv that sees Debian's numpy and meson-python
# (--system-site-packages, --no-build-isolation), with no network for pip and the PATH of
# a fresh login less /usr/local/bin (the CPU build).  Skips (77) without python3's venv,
# meson-python or patchelf (tools/setup.sh installs them).
#   wheel.sh SOURCE_ROOT
set -u
src=$1
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" -c "import venv, ensurepip, mesonpy, numpy" 2>/dev/null && command -v patchelf >/dev/null ||
    { echo "no venv, ensurepip, mesonpy, numpy or patchelf for $py: skipped"; exit 77; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/arcomm-wheel.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM
mkdir "$dir/src" "$dir/home"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # shellcheck disable=SC2016
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf -) | tar -C "$dir/src" -xf - || { echo "FAIL: copying the tree"; exit 1; }
else
    tar -C "$src" --exclude='./build*' -cf - . | tar -C "$dir/src" -xf - ||
        { echo "FAIL: copying the tree"; exit 1; }
fi

clean() {
    env -i HOME="$dir/home" PATH=/usr/bin:/bin LANG=C.UTF-8 TMPDIR="$dir/home" PIP_NO_INDEX=1 \
        PIP_DISABLE_PIP_VERSION_CHECK=1 ARCOMM_LOG_LEVEL=error "$@"
}
clean "$py" -m venv --system-site-packages "$dir/venv" >"$dir/log" 2>&1 &&
    clean "$dir/venv/bin/pip" install --no-build-isolation "$dir/src" >>"$dir/log" 2>&1 ||
    { tail -n 40 "$dir/log"; echo "FAIL: pip install . (the log's end above)"; exit 1; }

# Two thread ranks sum a vector; the library is the wheel's, inside the venv.
out=$(cd "$dir/home" && clean "$dir/venv/bin/python" - "$dir/venv" <<'PY' 2>&1
import sys, threading
import numpy as np
import arcomm

venv = sys.argv[1]
path = arcomm.library_path()
assert path.startswith(venv) and ".arcomm.mesonpy.libs" in path, path
cid = arcomm.new_id()
ok = [False, False]

def rank(r):
    with arcomm.Comm(cid, r, 2) as c:
        x = np.arange(1000, dtype=np.float32) * (r + 1)
        y = c.allreduce(x)
        ok[r] = bool((y == np.arange(1000, dtype=np.float32) * 3).all())

t = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
[x.start() for x in t]
[x.join() for x in t]
assert all(ok), ok
print("wheel's library", path.split("site-packages/")[-1], "version", arcomm.version(), "allreduce right")
PY
)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: the package from the wheel"; exit 1; }
exit 0
