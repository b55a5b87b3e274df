#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and for trying profiles/slurm without a cluster.
#
#   bash scripts/slurm_local.sh up      # install (apt, root only) if missing, configure, start, wait for the node
#   bash scripts/slurm_local.sh env     # the line to eval so that sbatch/squeue find this cluster
#   bash scripts/slurm_local.sh status  # sinfo and the queue
#   bash scripts/slurm_local.sh down    # stop the daemons this script started
#
# Everything (slurm.conf, munge key and socket, spool, state, logs, job completion log) lives in one folder,
# $SLURM_LOCAL_DIR (default /tmp/arc-pipeline-slurm); /etc/slurm/slurm.conf becomes a link to its slurm.conf
# (removed by `down`; an existing one is never replaced), because srun inside a job looks there. The daemons run as root (Slurm's own users and
# cgroups are not needed on one machine): process tracking by /proc (proctrack/linuxproc), no task binding
# (task/none), no slurmdbd. The node declares this machine's real CPUs and memory, and one GPU as a
# count-only generic resource (no device file), so that GPU requests (--gpus=1) are scheduled and counted
# like on a GPU cluster while the jobs themselves run on the CPU.
#
# Job records: without slurmdbd there is no `sacct`; every finished job is appended to
# $SLURM_LOCAL_DIR/jobcomp.log (JobCompType=jobcomp/filetxt: id, name, state, partition, nodes, cpus and
# TRES such as gres/gpu=1), and slurmctld keeps finished jobs for an hour (MinJobAge), so that
# `squeue --states=all` still shows them (profiles/slurm then needs `--slurm-status-command squeue`).
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/arc-pipeline-slurm}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-16817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-16818}
NODE=$(hostname -s)
PACKAGES=(slurmctld slurmd slurm-client munge)

log() { echo "slurm_local: $*" >&2; }
die() {
  log "$*"
  exit 1
}

install_packages() {
  local missing=()
  for command in slurmctld slurmd sbatch munged; do
    command -v "$command" >/dev/null 2>&1 || missing+=("$command")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing ${missing[*]}: installing them needs root and apt-get (apt-get install ${PACKAGES[*]})"
  fi
  log "installing ${PACKAGES[*]} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
}

# Memory the node offers: what slurmd measures, less 1 GiB for the daemons and the submitting Snakemake.
real_memory_mb() {
  local measured
  measured=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  echo $((measured > 2048 ? measured - 1024 : measured))
}

write_config() {
  mkdir -p "$DIR"/{munge,munge-socket,spool,state,log}
  chmod 700 "$DIR/munge"
  chmod 755 "$DIR/munge-socket"
  if [ ! -s "$DIR/munge/munge.key" ]; then
    head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
  fi
  local cpus
  cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
  cat >"$DIR/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: one node ($NODE), daemons as root, state under $DIR.
ClusterName=arclocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge-socket/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups on this machine: track job processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# No slurmdbd: finished jobs go to a text log, and slurmctld keeps them an hour for squeue.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
# Cores, memory and GPUs are consumable: jobs that do not fit next to each other wait.
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$(real_memory_mb) Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  # One GPU: scheduled and counted like a real one; /dev/null stands for its device file.
  echo "NodeName=$NODE Name=gpu File=/dev/null Count=1" >"$DIR/gres.conf"
  link_system_config
}

# srun inside a job finds the cluster only at Slurm's compiled-in path: the job step plugin of
# profiles/slurm removes SLURM_* variables (SLURM_CONF too) from the job's environment.
link_system_config() {
  local system=/etc/slurm/slurm.conf
  if [ -L "$system" ] && [ "$(readlink "$system")" = "$DIR/slurm.conf" ]; then
    return 0
  fi
  if [ -e "$system" ] || [ -L "$system" ]; then
    die "$system exists (another Slurm's configuration): not replacing it"
  fi
  mkdir -p /etc/slurm
  ln -s "$DIR/slurm.conf" "$system"
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  export SLURM_CONF=$DIR/slurm.conf
  if ! running "$DIR/munged.pid"; then
    munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge-socket/munge.socket" \
      --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munge.seed"
  fi
  running "$DIR/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
  running "$DIR/slurmd.pid" || slurmd -f "$SLURM_CONF" -N "$NODE"
}

wait_for_node() {
  local state="" deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    state=$(SLURM_CONF=$DIR/slurm.conf timeout 5 sinfo --noheader --nodes="$NODE" --format=%T 2>/dev/null || true)
    case "$state" in
      idle | mixed | allocated) return 0 ;;
    esac
    sleep 1
  done
  log "the node did not become idle (state: '${state:-no answer}'); logs: $DIR/log"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  return 1
}

up() {
  install_packages
  write_config
  start
  wait_for_node
  log "up: $(SLURM_CONF=$DIR/slurm.conf sinfo --noheader --format='%P %D %c CPUs %m MB %G %T')"
  echo "export SLURM_CONF=$DIR/slurm.conf"
}

down() {
  local name pid pids=() alive
  # slurmd and slurmctld stop together (each takes seconds to save its state), munged after them
  for name in slurmd slurmctld munged; do
    if running "$DIR/$name.pid"; then
      pid=$(cat "$DIR/$name.pid")
      kill "$pid"
      pids+=("$pid")
    fi
    rm -f "$DIR/$name.pid"
    [ "$name" = slurmctld ] || [ "$name" = munged ] || continue
    for _ in $(seq 1 30); do
      alive=()
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
      [ ${#alive[@]} -eq 0 ] && break
      sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && kill -9 "$pid"; done
    pids=()
  done
  if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$DIR/slurm.conf" ]; then
    rm -f /etc/slurm/slurm.conf
  fi
  log "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  status) SLURM_CONF=$DIR/slurm.conf sinfo && SLURM_CONF=$DIR/slurm.conf squeue --states=all ;;
  *) die "usage: $0 up|down|env|status" ;;
esac
