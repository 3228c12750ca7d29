#!/bin/sh
# SPDX-License-Identifier: MIT
# arrun refuses, as a usage error (exit 2) before any rank starts, a program the kernel
# would not exec: a script whose interpreter is missing, one whose interpreter is a
# script with a missing interpreter, and an executable file in no format this machine
# runs.  A working script still runs.
#   arrun_usage.sh ARRUN
set -u
arrun=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/arrun-usage.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
bad=0

# expect NAME PATTERN PROGRAM: arrun exits 2, says PATTERN, and no rank ran.
expect() {
    name=$1 pattern=$2 prog=$3
    rm -f "$dir/ran"
    "$arrun" -n 2 "$prog" >"$dir/out" 2>"$dir/err"
    rc=$?
    if [ $rc -ne 2 ]; then
        echo "$name: arrun exited $rc, expected 2 (usage error); stderr:"; cat "$dir/err"; bad=1
    elif ! grep -q -- "$pattern" "$dir/err"; then
        echo "$name: the message does not say '$pattern':"; cat "$dir/err"; bad=1
    fi
    if [ -e "$dir/ran" ]; then
        echo "$name: a rank ran"; bad=1
    fi
}

printf '#!/nonexistent/arrun-test-interp\ntouch %s/ran\n' "$dir" >"$dir/no-interp.sh"
chmod +x "$dir/no-interp.sh"
expect "missing interpreter" "interpreter /nonexistent/arrun-test-interp (from the #! line) does not exist" "$dir/no-interp.sh"

printf '#!%s\ntouch %s/ran\n' "$dir/no-interp.sh" "$dir" >"$dir/nested.sh"
chmod +x "$dir/nested.sh"
expect "interpreter that cannot run" "its interpreter $dir/no-interp.sh cannot be run" "$dir/nested.sh"

printf '#!%s\n' "$dir/plain" >"$dir/noexec-interp.sh"
printf 'data\n' >"$dir/plain"
chmod +x "$dir/noexec-interp.sh"
expect "interpreter not executable" "interpreter $dir/plain (from the #! line) cannot be run" "$dir/noexec-interp.sh"

printf '\001\002garbage bytes, no format at all\n' >"$dir/garbage"
chmod +x "$dir/garbage"
expect "foreign format" "neither an ELF executable nor a script" "$dir/garbage"

# Through PATH too.
cp "$dir/garbage" "$dir/arrun-test-garbage"
PATH="$dir:$PATH" expect "foreign format in PATH" "neither an ELF executable nor a script" arrun-test-garbage

# An ELF header of another machine (EM_AARCH64 = 183, or EM_X86_64 = 62 on an arm host).
machine=183
[ "$(uname -m)" = aarch64 ] && machine=62
printf '\177ELF\002\001\001\000\000\000\000\000\000\000\000\000\002\000' >"$dir/foreign-elf"
printf "\\$(printf '%03o' $machine)\\000" >>"$dir/foreign-elf"
head -c 200 /dev/zero >>"$dir/foreign-elf"
chmod +x "$dir/foreign-elf"
expect "ELF of another machine" "ELF executable for another machine" "$dir/foreign-elf"

# What does run still runs: a script with an interpreter, with "#! " and arguments.
printf '#! /bin/sh -e\necho "script-ok $ARCOMM_RANK"\n' >"$dir/good.sh"
chmod +x "$dir/good.sh"
out=$("$arrun" -n 2 "$dir/good.sh" 2>&1)
rc=$?
case "$out" in
*"script-ok 0"*"script-ok 1"* | *"script-ok 1"*"script-ok 0"*) ;;
*) echo "a good script: arrun exited $rc with: $out"; bad=1 ;;
esac
exit $bad
