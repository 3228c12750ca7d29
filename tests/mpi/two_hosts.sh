#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# two_hosts.sh PER_HOST PROGRAM [ARGS...]: PROGRAM on two emulated hosts, PER_HOST ranks
# each.  Each host is its own network, UTS and mount namespace (hostname h1 or h2, its
# own /dev/shm and /etc/hosts), the two joined by a veth pair; Open MPI talks TCP
# between them, and mpirun (on h1) starts h2's daemon through an rsh agent that enters
# h2's namespaces.  So MPI's shared-memory split sees two hosts, and arcomm's
# intra-host communicators cannot see each other's segments.  Exit 77 (skipped) where
# the namespaces cannot be made (not root, no ip/nsenter/unshare, a sandbox without
# them).
#
# ARCOMM_TEST_LINK_RATE (e.g. 10gbit, tc's units): each end of the veth pair sends
# through a token bucket of that rate (tc qdisc tbf; ARCOMM_TEST_LINK_BURST, default
# 4mb, and a 50 ms queue), a network slower than the VM's memory copy; without tc the
# link stays unshaped, with a note.
set -euo pipefail
per_host=$1
shift
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for namespaces"
for t in mpirun ip nsenter unshare; do command -v "$t" >/dev/null 2>&1 || skip "no $t"; done

tag=arc$$
dir=$(mktemp -d "/tmp/arcomm-hosts.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns del "${tag}a" 2>/dev/null || true
    ip netns del "${tag}b" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

ip netns add "${tag}a" 2>/dev/null || skip "ip netns add failed"
ip netns add "${tag}b" || skip "ip netns add failed"
ip link add "${tag}0" type veth peer name "${tag}1" || skip "no veth"
ip link set "${tag}0" netns "${tag}a"
ip link set "${tag}1" netns "${tag}b"
ip -n "${tag}a" addr add 10.231.7.1/24 dev "${tag}0"
ip -n "${tag}b" addr add 10.231.7.2/24 dev "${tag}1"
for ns in a b; do ip -n "${tag}$ns" link set lo up; done
ip -n "${tag}a" link set "${tag}0" up
ip -n "${tag}b" link set "${tag}1" up
if [ -n "${ARCOMM_TEST_LINK_RATE:-}" ]; then
    if command -v tc >/dev/null 2>&1; then
        for end in a0 b1; do
            ip netns exec "${tag}${end%?}" tc qdisc add dev "${tag}${end#?}" root tbf \
                rate "$ARCOMM_TEST_LINK_RATE" burst "${ARCOMM_TEST_LINK_BURST:-4mb}" latency 50ms
        done
        echo "two_hosts: the link shaped to $ARCOMM_TEST_LINK_RATE each way (tc tbf)"
    else
        echo "two_hosts: no tc: ARCOMM_TEST_LINK_RATE=$ARCOMM_TEST_LINK_RATE ignored, the link is not shaped"
    fi
fi
printf '127.0.0.1 localhost\n10.231.7.1 h1\n10.231.7.2 h2\n' >"$dir/hosts"

# A holder per host: in its network namespace, new UTS and mount namespaces with the
# host's name, its own /dev/shm and /etc/hosts; the agent enters its namespaces.
for i in 1 2; do
    ns=${tag}$([ $i = 1 ] && echo a || echo b)
    ip netns exec "$ns" unshare --uts --mount --propagation private sh -c "
        hostname h$i && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
        mount --bind '$dir/hosts' /etc/hosts && echo ready >'$dir/h$i.ready' &&
        exec sleep 600" &
    pids+=($!)
done
for i in 1 2; do
    for _ in $(seq 100); do [ -f "$dir/h$i.ready" ] && break; sleep 0.05; done
    [ -f "$dir/h$i.ready" ] || skip "host h$i did not come up (mounts refused?)"
done
# ip netns exec, unshare (no --fork) and sh exec into one another: the holder keeps
# the PID that started.
h1=${pids[0]}
h2=${pids[1]}
[ "$(nsenter -t "$h2" --uts hostname)" = h2 ] || skip "h2's UTS namespace not entered"

cat >"$dir/agent" <<EOF
#!/bin/sh
# rsh agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespaces.
host=\$1
shift
case \$host in
h1) pid=$h1 ;;
h2) pid=$h2 ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec nsenter -t \$pid --net --uts --mount -- /bin/sh -c "\$*"
EOF
chmod +x "$dir/agent"

[ -n "${ARCOMM_MPI_RANKS_PER_HOST:-}" ] || unset ARCOMM_MPI_RANKS_PER_HOST
# The ranks on h2 get what is set here of arcomm's and Open MPI's variables.
pass=()
for v in $(env | sed -n 's/^\(ARCOMM_[A-Z_]*\|OMPI_MCA_[a-z_]*\)=.*/\1/p'); do pass+=(-x "$v"); done
# TWO_HOSTS_PRELOAD: a library the ranks preload (libarcomm_pmpi), not mpirun itself.
[ -n "${TWO_HOSTS_PRELOAD:-}" ] && pass+=(-x "LD_PRELOAD=$TWO_HOSTS_PRELOAD")
# TWO_HOSTS_MPIRUN_ARGS: more mpirun options (words), e.g. what keeps the job alive
# after a process dies (run_mpi_kill.sh).
read -r -a extra <<<"${TWO_HOSTS_MPIRUN_ARGS:-}"
# TWO_HOSTS_LIMIT: seconds after which mpirun is ended (SIGTERM, then SIGKILL 5 s later);
# Open MPI 4.1's mpirun may stay after a process of the job died on the other host.
limit=()
[ -n "${TWO_HOSTS_LIMIT:-}" ] && limit=(timeout -k 5 "$TWO_HOSTS_LIMIT")
prog=$(realpath "$1")
shift
set +e
nsenter -t "$h1" --net --uts --mount --wd="$PWD" -- "${limit[@]}" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np $((2 * per_host)) \
    --host "h1:$per_host,h2:$per_host" --mca plm_rsh_agent "$dir/agent" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include 10.231.7.0/24 \
    --mca oob_tcp_if_include 10.231.7.0/24 "${extra[@]}" "${pass[@]}" "$prog" "$@"
rc=$?
set -e
# What crossed between the hosts (for the cost model in docs/multihost.md).
tx() { ip -n "$1" -s link show "$2" | awk '/TX:/ { getline; print $1 }'; }
echo "two_hosts: h1 -> h2 $(tx "${tag}a" "${tag}0") bytes, h2 -> h1 $(tx "${tag}b" "${tag}1") bytes"
# Whether the shaping engaged: each token bucket's own count (bytes it passed, packets
# it held back: "overlimits"); a bucket that passed nothing was bypassed.
if [ -n "${ARCOMM_TEST_LINK_RATE:-}" ] && command -v tc >/dev/null 2>&1; then
    for end in a0:h1 b1:h2; do
        e=${end%:*}
        st=$(ip netns exec "${tag}${e%?}" tc -s qdisc show dev "${tag}${e#?}" |
            awk '/^qdisc tbf/ { on = 1 } on && /Sent/ { print; exit }')
        echo "two_hosts: ${end#*:}'s token bucket:${st:- none}"
    done
fi
# Nothing left in either host's /dev/shm.
for h in "$h1" "$h2"; do
    left=$(nsenter -t "$h" --mount -- sh -c 'ls /dev/shm | grep "^arcomm-" || true')
    [ -z "$left" ] || { echo "left behind on a host: $left"; rc=1; }
done
exit $rc
