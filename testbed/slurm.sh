#!/usr/bin/env bash
# testbed/slurm.sh - a real one-node Slurm cluster on this machine, for tests.
#
# Usage (as root; needs Debian packages slurm-wlm and munge):
#   testbed/slurm.sh start    # munge key + munged, write /etc/slurm/slurm.conf,
#                             # start slurmctld + slurmd, wait until the node is idle
#   testbed/slurm.sh stop     # kill slurmd, slurmctld, slurmstepd, munged
#   testbed/slurm.sh status   # daemons, sinfo, squeue; rc 0 only if the node is usable
#
# Then e.g.:  srun -n2 hostname ;  salloc -n2 srun -n2 env ;  sbatch --wrap 'env'
#
# The cluster: node = `hostname` (NodeAddr 127.0.0.1), CPUs=2, RealMemory=1024,
# one partition "debug" (Default=YES), select/cons_tres with CR_Core,
# proctrack/linuxproc + task/none (no cgroups), no accounting, SlurmUser=root.
# State is cleared on every start (slurmctld -c), so old jobs never survive.
# Config: /etc/slurm/slurm.conf (Debian's slurm-wlm 22.05 reads this path).
# Logs:   /var/log/slurm/slurmctld.log, /var/log/slurm/slurmd.log, /var/log/munge/munged.log
#
# "start" is idempotent: if the daemons already run with the same config and
# the node is idle it does nothing; otherwise it restarts the Slurm daemons.
# Every wait is bounded (SLURM_TESTBED_TIMEOUT seconds, default 30).
set -euo pipefail

TIMEOUT=${SLURM_TESTBED_TIMEOUT:-30}
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/lib/slurm/slurmd
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm
CTLD_PID=$RUN_DIR/slurmctld.pid
SLURMD_PID=$RUN_DIR/slurmd.pid
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
NODE=$(hostname)
PARTITION=debug

die() { echo "slurm.sh: $*" >&2; exit 1; }
log() { echo "slurm.sh: $*"; }

[[ $(id -u) -eq 0 ]] || die "must be run as root"

# ---------------------------------------------------------------- helpers
# pids of a daemon: from its pid file if alive, else by exact program name.
pids_of() {  # NAME [PIDFILE]
    local name=$1 pidfile=${2:-} p
    if [[ -n $pidfile && -s $pidfile ]]; then
        p=$(cat "$pidfile")
        if kill -0 "$p" 2>/dev/null; then echo "$p"; return 0; fi
    fi
    pidof "$name" 2>/dev/null | tr ' ' '\n' || true
}

running() { [[ -n $(pids_of "$@") ]]; }

# Stop a daemon: SIGTERM, bounded wait, then SIGKILL.
stop_daemon() {  # NAME [PIDFILE]
    local name=$1 pidfile=${2:-} pids i
    pids=$(pids_of "$name" "$pidfile")
    [[ -n $pids ]] || return 0
    kill $pids 2>/dev/null || true
    for ((i = 0; i < TIMEOUT * 10; i++)); do
        running "$name" || break
        sleep 0.1
    done
    pids=$(pidof "$name" 2>/dev/null || true)
    if [[ -n $pids ]]; then kill -9 $pids 2>/dev/null || true; sleep 0.2; fi
    [[ -z $pidfile ]] || rm -f "$pidfile"
}

# Wait until a command succeeds, bounded by TIMEOUT seconds.
wait_for() {  # DESCRIPTION CMD...
    local what=$1 i
    shift
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}

node_state() { sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n1; }
node_idle() { [[ $(node_state) == idle ]]; }
munge_ok() { munge -n | unmunge >/dev/null; }

# ---------------------------------------------------------------- munge
start_munge() {
    command -v munged >/dev/null || die "munged not found (apt-get install munge)"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s $MUNGE_KEY ]]; then
        log "creating $MUNGE_KEY"
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
        fi
    fi
    chown munge:munge "$MUNGE_KEY"
    chmod 0400 "$MUNGE_KEY"
    if running munged "$MUNGE_PID" && munge_ok 2>/dev/null; then
        return 0
    fi
    stop_daemon munged "$MUNGE_PID"
    rm -f /run/munge/munged.socket.2 /run/munge/munged.socket.2.lock
    runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID"
    wait_for munge munge_ok || die "munged did not come up (see /var/log/munge/munged.log)"
}

# ---------------------------------------------------------------- slurm.conf
write_conf() {  # prints "changed" if the file was (re)written
    local tmp
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
# Written by scaletrain testbed/slurm.sh - a one-node test cluster.
ClusterName=scaletrain-testbed
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldPort=6817
SlurmdPort=6818
# Short timers so tests do not wait long for cleanup.
KillWait=5
MinJobAge=60
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=1024 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    install -d -m 0755 "$CONF_DIR"
    if [[ -f $CONF ]] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
    else
        install -m 0644 "$tmp" "$CONF"
        rm -f "$tmp"
        echo changed
    fi
}

# ---------------------------------------------------------------- commands
do_start() {
    command -v slurmctld >/dev/null || die "slurmctld not found (apt-get install slurm-wlm)"
    start_munge
    install -d -m 0755 "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR" "$RUN_DIR"
    local changed
    changed=$(write_conf)
    if [[ -z $changed ]] && running slurmctld "$CTLD_PID" && running slurmd "$SLURMD_PID" \
       && node_idle; then
        log "already running; node $NODE idle"
        return 0
    fi
    stop_slurm
    # -c: start from a clean state (forget jobs of earlier runs).
    slurmctld -c || die "slurmctld failed to start (see $LOG_DIR/slurmctld.log)"
    wait_for slurmctld scontrol ping \
        || die "slurmctld not answering after ${TIMEOUT}s (see $LOG_DIR/slurmctld.log)"
    slurmd || die "slurmd failed to start (see $LOG_DIR/slurmd.log)"
    if ! wait_for "idle node" node_idle; then
        # A node left DOWN/DRAIN by an earlier run: resume it once and retry.
        scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
        wait_for "idle node" node_idle \
            || die "node $NODE not idle after ${TIMEOUT}s (state: '$(node_state)'; see $LOG_DIR/slurmd.log and $LOG_DIR/slurmctld.log)"
    fi
    log "running; node $NODE idle, partition $PARTITION"
}

stop_slurm() {
    stop_daemon slurmd "$SLURMD_PID"
    stop_daemon slurmctld "$CTLD_PID"
    # Step daemons of jobs that were still running.
    local p
    p=$(pidof slurmstepd 2>/dev/null || true)
    [[ -z $p ]] || kill -9 $p 2>/dev/null || true
}

do_stop() {
    stop_slurm
    stop_daemon munged "$MUNGE_PID"
    log "stopped"
}

do_status() {
    local rc=0 d
    for d in munged slurmctld slurmd; do
        echo "$d: $(pids_of $d | tr '\n' ' ')"
        running $d || rc=1
    done
    if [[ $rc -eq 0 ]]; then
        sinfo -N -l || rc=1
        squeue || true
        node_idle || [[ $(node_state) == mix || $(node_state) == alloc ]] || rc=1
    fi
    return $rc
}

case "${1:-}" in
    start)  do_start ;;
    stop)   do_stop ;;
    status) do_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
