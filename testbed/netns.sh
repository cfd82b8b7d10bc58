#!/usr/bin/env bash
# testbed/netns.sh - two fake "hosts" on this one machine, for multi-node tests.
#
# Creates two network namespaces, st-node0 and st-node1, joined by a veth pair.
# Inside EACH namespace the veth end is called "stnet0", so a single
# GLOO_SOCKET_IFNAME=stnet0 works on both sides:
#
#     st-node0: stnet0 = 10.77.0.1/24      st-node1: stnet0 = 10.77.0.2/24
#
# 10.77.0.0/24 exists only on this veth pair: there is no route out of the
# namespaces, so test traffic can never leave the machine.
#
# Usage (as root):
#   testbed/netns.sh up               # (re)create both namespaces; idempotent
#   testbed/netns.sh down             # kill everything inside them, delete them
#                                     # (and /tmp/scaletrain-testbed, see mpi-ssh-agent)
#   testbed/netns.sh status           # show namespaces, addresses, link state; rc 1 if not up
#   testbed/netns.sh exec NODE cmd... # run cmd inside NODE's namespace
#                                     # NODE: st-node0|node0|0|10.77.0.1 or st-node1|node1|1|10.77.0.2
#   testbed/netns.sh link-down        # set node1's stnet0 down (simulate a cut cable)
#   testbed/netns.sh link-up          # set it up again
#   testbed/netns.sh shape RATE [DELAY] # cap the link at RATE each way (tc tbf; e.g. 1gbit, 10gbit),
#                                     # and add DELAY each way (e.g. 500us, 2ms): tc netem where the
#                                     # kernel has it, else a delay line (see below)
#   testbed/netns.sh unshape          # remove the cap and the delay (veth runs at memory-copy speed)
#   testbed/netns.sh pin on|off       # on: each "host" gets one core of its own (st-node0 core 0,
#                                     # st-node1 core 1; taskset in `exec` and mpi-ssh-agent), so that
#                                     # two hosts compute like two machines instead of sharing the cores
#
# The delay line, for kernels without netem: each host's stnet0 becomes a TUN device with the
# same address (the veth end, renamed stveth0, is set down), and testbed/delay_line.py, a
# process of the root namespace, carries every packet from one to the other DELAY later.
# `shape RATE` without DELAY, `unshape` and `down` put the veth pair back.
#
# Note: inside a namespace the machine's hostname still resolves to 127.0.x.x
# (via /etc/hosts), so distributed code must be told which interface/address to
# use: GLOO_SOCKET_IFNAME=stnet0, MASTER_ADDR=10.77.0.1 (see testbed/README.md).
set -euo pipefail

NS0=st-node0
NS1=st-node1
IFNAME=stnet0            # interface name inside both namespaces
ADDR0=10.77.0.1
ADDR1=10.77.0.2
PREFIX=24
# Temporary names used in the root namespace while creating the pair
# (must be unique there; renamed to $IFNAME once moved into a namespace).
TMP0=st-veth0
TMP1=st-veth1
VETH_ASIDE=stveth0       # the veth end's name while the delay line's TUN device is stnet0
DELAY_PID=/tmp/scaletrain-delay-line.pid
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "netns.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must be run as root"
command -v ip >/dev/null || die "'ip' not found (apt-get install iproute2)"

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# Map a node spec to its namespace name.
ns_of() {
    case "$1" in
        st-node0|node0|0|"$ADDR0") echo "$NS0" ;;
        st-node1|node1|1|"$ADDR1") echo "$NS1" ;;
        *) die "unknown node '$1' (use st-node0|node0|0|$ADDR0 or st-node1|node1|1|$ADDR1)" ;;
    esac
}

kill_ns_procs() {
    local ns=$1 i
    ns_exists "$ns" || return 0
    # Several rounds: killed processes may have had children being forked.
    for i in 1 2 3 4 5; do
        [[ -n $(ip netns pids "$ns" 2>/dev/null) ]] || return 0
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        sleep 0.2
    done
    [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] || echo "netns.sh: warning: processes still in $ns" >&2
}

do_down() {
    local ns
    stop_delay_line
    for ns in "$NS0" "$NS1"; do
        kill_ns_procs "$ns"
        # Deleting a namespace destroys the veth end inside it (and thus its peer).
        if ns_exists "$ns"; then ip netns del "$ns"; fi
    done
    # Stale pair left in the root namespace by an interrupted "up".
    ip link del "$TMP0" 2>/dev/null || true
    ip link del "$TMP1" 2>/dev/null || true
    # Per-"host" TMPDIRs made by testbed/mpi-ssh-agent.
    rm -rf /tmp/scaletrain-testbed
}

do_up() {
    do_down
    ip netns add "$NS0"
    ip netns add "$NS1"
    ip link add "$TMP0" type veth peer name "$TMP1"
    ip link set "$TMP0" netns "$NS0"
    ip link set "$TMP1" netns "$NS1"
    local ns tmp addr
    for spec in "$NS0 $TMP0 $ADDR0" "$NS1 $TMP1 $ADDR1"; do
        read -r ns tmp addr <<<"$spec"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$tmp" name "$IFNAME"
        ip -n "$ns" addr add "$addr/$PREFIX" dev "$IFNAME"
        ip -n "$ns" link set "$IFNAME" up
    done
    # Bounded wait (~5 s) until the link works. With ping (iputils-ping)
    # installed we test reachability both ways; without it, we wait for the
    # carrier (LOWER_UP) on both ends.
    local i
    for i in $(seq 1 50); do
        if command -v ping >/dev/null; then
            if ip netns exec "$NS0" ping -c1 -W1 "$ADDR1" >/dev/null 2>&1 \
               && ip netns exec "$NS1" ping -c1 -W1 "$ADDR0" >/dev/null 2>&1; then
                echo "netns up: $NS0 $IFNAME=$ADDR0  <->  $NS1 $IFNAME=$ADDR1"
                return 0
            fi
        elif ip -n "$NS0" link show "$IFNAME" | grep -q LOWER_UP \
             && ip -n "$NS1" link show "$IFNAME" | grep -q LOWER_UP; then
            echo "netns up: $NS0 $IFNAME=$ADDR0  <->  $NS1 $IFNAME=$ADDR1 (no ping installed; carrier only)"
            return 0
        fi
        sleep 0.1
    done
    die "namespaces created but $ADDR0 <-> $ADDR1 not reachable"
}

do_status() {
    local ns rc=0
    for ns in "$NS0" "$NS1"; do
        if ns_exists "$ns"; then
            echo "== $ns"
            ip -n "$ns" -br addr show
            echo "   pids: $(ip netns pids "$ns" | tr '\n' ' ')"
        else
            echo "== $ns: absent"
            rc=1
        fi
    done
    return $rc
}

set_link() {
    ns_exists "$NS1" || die "$NS1 does not exist (run: $0 up)"
    ip -n "$NS1" link set "$IFNAME" "$1"
}

# A token bucket on both ends: each direction carries at most RATE, like a real link of
# that speed. The burst must hold the largest packet veth hands over (with segmentation
# offload a 64 KiB super-packet, not one 1500-byte frame): 0.2 ms of the rate, 96 KiB at
# least (the qdisc's timer is a high-resolution one: 1 Gbit/s keeps 0.95 Gbit/s with it,
# 10 Gbit/s 9.2). No more: a larger bucket lets a message that fits in it cross at memory
# speed, which no real link of that rate does (a pipeline's 262 KB activations crossed a
# "1 Gbit/s" link with a 250 KB bucket nearly for free).
burst_for() {
    local rate=$1 number unit bits
    number=${rate%%[a-zA-Z]*}; unit=${rate#"$number"}
    case "$unit" in
        gbit) bits=$((number * 1000000000)) ;;
        mbit) bits=$((number * 1000000)) ;;
        kbit) bits=$((number * 1000)) ;;
        *) die "rate '$rate': give it as Nkbit, Nmbit or Ngbit (e.g. 1gbit, 200mbit)" ;;
    esac
    local burst=$((bits / 8 / 5000))
    echo $((burst > 98304 ? burst : 98304))
}

stop_delay_line() {
    if [[ -f $DELAY_PID ]]; then
        kill "$(cat "$DELAY_PID")" 2>/dev/null || true
        rm -f "$DELAY_PID"
    fi
}

# The veth pair as stnet0 again (after a delay line).
veth_back() {
    local ns
    stop_delay_line
    for ns in "$NS0" "$NS1"; do
        ns_exists "$ns" || continue
        ip -n "$ns" link show "$VETH_ASIDE" >/dev/null 2>&1 || continue
        ip -n "$ns" link del "$IFNAME" 2>/dev/null || true
        ip -n "$ns" link set "$VETH_ASIDE" name "$IFNAME"
        ip -n "$ns" link set "$IFNAME" up
    done
}

# stnet0 as a TUN device on each host, joined by testbed/delay_line.py DELAY later (the veth
# pair as stnet0 when called: shape_link puts it back first).
delay_line() {
    local delay=$1 ns addr i
    command -v python3 >/dev/null || die "the delay line needs python3"
    [[ -c /dev/net/tun ]] || die "no /dev/net/tun: this kernel can add no delay (no netem, no TUN); shape without DELAY"
    for spec in "$NS0 $ADDR0" "$NS1 $ADDR1"; do
        read -r ns addr <<<"$spec"
        ip -n "$ns" link set "$IFNAME" down
        ip -n "$ns" link set "$IFNAME" name "$VETH_ASIDE"
        ip -n "$ns" tuntap add dev "$IFNAME" mode tun
        ip -n "$ns" link set "$IFNAME" mtu 65000
        ip -n "$ns" addr add "$addr/$PREFIX" dev "$IFNAME"
        ip -n "$ns" link set "$IFNAME" up
    done
    setsid python3 "$HERE/delay_line.py" "$delay" "$NS0" "$NS1" "$IFNAME" </dev/null >/tmp/scaletrain-delay-line.log 2>&1 &
    echo $! >"$DELAY_PID"
    # Bounded wait (~5 s) for both TUN devices to have their carrier (the delay line holds them).
    for i in $(seq 1 50); do
        if ip -n "$NS0" link show "$IFNAME" | grep -q LOWER_UP && ip -n "$NS1" link show "$IFNAME" | grep -q LOWER_UP; then
            return 0
        fi
        kill -0 "$(cat "$DELAY_PID")" 2>/dev/null || break
        sleep 0.1
    done
    cat /tmp/scaletrain-delay-line.log >&2
    veth_back
    die "the delay line did not start (its output is above)"
}

shape_link() {
    local ns rate=$1 delay=${2:-} burst
    burst=$(burst_for "$rate")
    for ns in "$NS0" "$NS1"; do
        ns_exists "$ns" || die "$ns does not exist (run: $0 up)"
    done
    veth_back
    if [[ -n $delay ]] && ! ip netns exec "$NS0" tc qdisc add dev "$IFNAME" root handle 1: netem delay "$delay" 2>/dev/null; then
        delay_line "$delay"   # no netem here: the delay in a process of its own, the rate by tbf as below
        delay=
    fi
    for ns in "$NS0" "$NS1"; do
        ip netns exec "$ns" tc qdisc del dev "$IFNAME" root 2>/dev/null || true
        if [[ -n $delay ]]; then
            # netem delays every packet; tbf under it caps the rate.
            ip netns exec "$ns" tc qdisc add dev "$IFNAME" root handle 1: netem delay "$delay"
            ip netns exec "$ns" tc qdisc add dev "$IFNAME" parent 1: handle 2: tbf rate "$rate" burst "$burst" latency 100ms \
                || die "tc refused rate '$rate' (use a tc rate such as 1gbit, 2500mbit or 10gbit)"
        else
            ip netns exec "$ns" tc qdisc add dev "$IFNAME" root tbf rate "$rate" burst "$burst" latency 100ms \
                || die "tc refused rate '$rate' (use a tc rate such as 1gbit, 2500mbit or 10gbit)"
        fi
    done
}

# One core per "host": the namespaces share the machine's cores, so without this a job across
# both hosts competes with itself as no two real machines do. The cores are written to a file
# that `exec` and mpi-ssh-agent read (taskset -c CORE).
PIN_FILE=/tmp/scaletrain-testbed/pinned
pin() {
    case "$1" in
        on)
            local cores
            cores=$(nproc)
            [[ $cores -ge 2 ]] || die "pin needs 2 cores; this machine lets us use $cores"
            command -v taskset >/dev/null || die "'taskset' not found (apt-get install util-linux)"
            mkdir -p "$(dirname "$PIN_FILE")"
            printf '%s 0\n%s 1\n' "$NS0" "$NS1" >"$PIN_FILE"
            echo "pinned: $NS0 core 0, $NS1 core 1" ;;
        off) rm -f "$PIN_FILE"; echo "unpinned" ;;
        *) die "usage: $0 pin on|off" ;;
    esac
}

unshape_link() {
    local ns
    veth_back
    for ns in "$NS0" "$NS1"; do
        ns_exists "$ns" && ip netns exec "$ns" tc qdisc del dev "$IFNAME" root 2>/dev/null || true
    done
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case "$cmd" in
    up)        do_up ;;
    down)      do_down ;;
    status)    do_status ;;
    link-down) set_link down ;;
    link-up)   set_link up ;;
    shape)     [[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 shape RATE [DELAY] (e.g. 1gbit 500us)"; shape_link "$@" ;;
    pin)       [[ $# -eq 1 ]] || die "usage: $0 pin on|off"; pin "$1" ;;
    unshape)   unshape_link ;;
    exec)
        [[ $# -ge 2 ]] || die "usage: $0 exec NODE cmd..."
        ns=$(ns_of "$1"); shift
        ns_exists "$ns" || die "$ns does not exist (run: $0 up)"
        core=$(awk -v ns="$ns" '$1 == ns {print $2}' "$PIN_FILE" 2>/dev/null || true)
        if [[ -n $core ]]; then exec taskset -c "$core" ip netns exec "$ns" "$@"; fi
        exec ip netns exec "$ns" "$@"
        ;;
    *) echo "usage: $0 up|down|status|link-down|link-up|shape RATE [DELAY]|unshape|pin on|off|exec NODE cmd..." >&2; exit 2 ;;
esac
