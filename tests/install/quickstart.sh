#!/bin/bash
# SPDX-License-Identifier: MIT
# README.md's quick start, exactly as written: the ```sh blocks between
# <!-- quickstart:begin --> and <!-- quickstart:end -->, run as a user who is not root,
# in a fresh HOME, in a fresh copy of the source tree (git's tracked and unignored files),
# with the PATH of a fresh Debian login less /usr/local/bin (where CUDA toolkits put
# nvcc: the build is the CPU one, a CUDA build takes many minutes) and no network for pip
# (PIP_NO_INDEX).  The lines that start with `sudo` are the root step: the test does
# not run them (tools/setup.sh, the test run's setup, installs the packages); it checks
# that every package they name is one tools/setup.sh installs, and skips (77) where one
# is not installed.  As root the test makes a user of its own for the run (useradd) and
# removes it after; otherwise it runs as the calling user.
#   quickstart.sh SOURCE_ROOT
set -u
src=$1
readme=$src/README.md

# The block's shell lines, in order (every ```sh fence between the markers).
block=$(awk '/<!-- quickstart:begin -->/ { on = 1; next }
             /<!-- quickstart:end -->/ { on = 0 }
             on && /^```sh$/ { fence = 1; next }
             on && fence && /^```$/ { fence = 0; next }
             on && fence { print }' "$readme")
[ -n "$block" ] || { echo "FAIL: no \`\`\`sh lines between the quickstart markers of README.md"; exit 1; }

# The root step: packages that setup.sh installs, installed here.
root_lines=$(printf '%s\n' "$block" | grep '^sudo ')
user_lines=$(printf '%s\n' "$block" | grep -v '^sudo ')
setup_pkgs=$(sed -n '/^pkgs=(/,/)/p' "$src/tools/setup.sh" | tr -d '()' | sed 's/^pkgs=//' | tr -s ' \n' '\n')
missing=
for p in $(printf '%s\n' "$root_lines" | sed -n 's/^sudo apt-get install \(-y \)\{0,1\}//p'); do
    printf '%s\n' "$setup_pkgs" | grep -qx -- "$p" ||
        { echo "FAIL: README's quick start installs $p, which tools/setup.sh does not"; exit 1; }
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "not installed:$missing (run tools/setup.sh as root): skipped"
    exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/arcomm-quickstart.XXXXXX") || exit 1
user=
cleanup() {
    # userdel refuses while a process of the user still runs (an interrupted build).
    if [ -n "$user" ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            userdel "$user" >/dev/null 2>&1 && break
            sleep 1
        done
        id "$user" >/dev/null 2>&1 && userdel -f "$user" >/dev/null 2>&1
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
chmod 755 "$dir"

# A fresh copy of the tree: what a clone holds (tracked files, and new ones not ignored).
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

# shellcheck disable=SC2016 # the lines expand in the user's shell, not here
{
    echo 'set -ex'
    echo 'cd "$ARCOMM_QS_SRC"'
    printf '%s\n' "$user_lines"
    # What the block promised: the library and the tools under the prefix in this HOME.
    echo 'test -f "$HOME/.local/arcomm/lib/libarcomm.so.0" && test -x "$HOME/.local/arcomm/bin/arrun"'
} >"$dir/quickstart.sh"

if [ "$(id -u)" -eq 0 ]; then
    command -v useradd >/dev/null && command -v runuser >/dev/null ||
        { echo "root without useradd or runuser: skipped"; exit 77; }
    user=arcqs$$
    useradd --no-create-home --home-dir "$dir/home" --shell /bin/bash "$user" ||
        { user=; echo "useradd failed: skipped"; exit 77; }
    chown -R "$user:" "$dir/src" "$dir/home"
    run=(runuser -u "$user" --)
else
    run=()
fi

echo "quick start: $(printf '%s\n' "$user_lines" | wc -l) lines as $([ -n "$user" ] && echo "$user" || id -un), HOME=$dir/home"
"${run[@]}" env -i HOME="$dir/home" USER="${user:-$(id -un)}" LOGNAME="${user:-$(id -un)}" \
    PATH=/usr/bin:/bin LANG=C.UTF-8 TMPDIR="$dir/home" \
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 ARCOMM_QS_SRC="$dir/src" \
    bash "$dir/quickstart.sh" >"$dir/log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    tail -n 60 "$dir/log"
    echo "FAIL: README's quick start exited $rc (the last lines of its log above)"
    exit 1
fi
grep -E '^(rank|arrun) ' "$dir/log"
echo "README's quick start ran"
exit 0
