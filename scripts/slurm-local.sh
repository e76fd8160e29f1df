#!/usr/bin/env bash
# A real one-node Slurm on this machine, from Debian packages: munge, MariaDB + slurmdbd (so `sacct` answers),
# slurmctld and slurmd, all CPUs of this machine in one partition `local`.
#
#   sudo scripts/slurm-local.sh start    # install if needed, start (idempotent: a running cluster is kept)
#   sudo scripts/slurm-local.sh status   # sinfo + daemons
#   sudo scripts/slurm-local.sh stop     # stop every daemon this script started, remove its state and config
#
# Everything lives under $SCALESTUDY_SLURM_DIR (default /var/tmp/scalestudy-slurm). Clients (sbatch, squeue, sacct)
# find the configuration through /etc/slurm/slurm.conf, a link this script creates and removes; an existing
# /etc/slurm/slurm.conf that is not ours is never touched (then start refuses: this machine has a Slurm already).
# Needs root (daemons run as root; munged as user munge). Made for CI and laptops, not for production.
set -euo pipefail

DIR=${SCALESTUDY_SLURM_DIR:-/var/tmp/scalestudy-slurm}
CONF_LINK=/etc/slurm/slurm.conf
DB_PORT=${SCALESTUDY_SLURM_DB_PORT:-3317}
PACKAGES=(munge slurm-wlm slurmdbd mariadb-server)

log() { echo "slurm-local: $*" >&2; }
die() { log "error: $*"; exit 2; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (it starts system daemons)"; }

install_packages() {
  local missing=()
  for cmd in munged slurmctld slurmd slurmdbd mariadbd sbatch; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  [ ${#missing[@]} = 0 ] && return
  log "installing ${PACKAGES[*]} (missing: ${missing[*]})"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT CMD...: poll CMD until it succeeds
  local limit=$1 what=$2 t=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    t=$((t + 1))
    [ "$t" -le $((limit * 5)) ] || die "$what did not come up in ${limit}s (logs: $DIR/*.log)"
    sleep 0.2
  done
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi  # a munged already answers: share it
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; }
  runuser -u munge -- munged --pid-file /run/munge/munged.pid
  touch "$DIR/started-munge"
  wait_for 10 munged sh -c 'munge -n | unmunge'
}

start_mariadb() {  # a private server on 127.0.0.1:$DB_PORT, files under $DIR/db (owned by user mysql)
  local db="$DIR/db"
  alive "$db/mysql.pid" && return
  if [ ! -d "$db/data/mysql" ]; then
    mkdir -p "$db/data"
    chown -R mysql:mysql "$db"
    mariadb-install-db --user=mysql --datadir="$db/data" --auth-root-authentication-method=socket \
      >"$DIR/mysql-init.log" 2>&1 || die "mariadb-install-db failed (see $DIR/mysql-init.log)"
  fi
  mariadbd --user=mysql --datadir="$db/data" --socket="$db/mysql.sock" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --pid-file="$db/mysql.pid" --log-error="$db/mysql.log" \
    --innodb-buffer-pool-size=32M --skip-name-resolve >/dev/null 2>&1 &
  wait_for 60 MariaDB mariadb --socket="$db/mysql.sock" -e 'SELECT 1'
  mariadb --socket="$db/mysql.sock" <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

write_configs() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024))
  mkdir -p "$DIR/etc" "$DIR/state" "$DIR/spool"
  cat >"$DIR/etc/slurm.conf" <<CONF
# Written by scalestudy scripts/slurm-local.sh: a one-node test cluster. Removed by 'slurm-local.sh stop'.
ClusterName=scalestudy
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
# No cgroups in containers: track processes by parent id, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# A cancelled or timed-out job gets SIGTERM, then SIGKILL 5 s later (default 30 s).
KillWait=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat >"$DIR/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$DIR/etc/slurmdbd.conf"
}

link_config() {
  mkdir -p /etc/slurm
  if [ -L "$CONF_LINK" ] && [ "$(readlink "$CONF_LINK")" = "$DIR/etc/slurm.conf" ]; then return; fi
  [ -e "$CONF_LINK" ] && die "$CONF_LINK exists and is not ours: this machine has a Slurm configuration already"
  ln -s "$DIR/etc/slurm.conf" "$CONF_LINK"
}

start() {
  need_root
  install_packages
  mkdir -p "$DIR"
  if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" && alive "$DIR/slurmdbd.pid"; then
    log "already running ($DIR)"
    return
  fi
  [ -f "$DIR/etc/slurm.conf" ] || write_configs
  link_config
  start_munge
  start_mariadb
  export SLURM_CONF="$DIR/etc/slurm.conf"
  # slurmdbd reads slurmdbd.conf beside $SLURM_CONF
  alive "$DIR/slurmdbd.pid" || slurmdbd 2>>"$DIR/slurmdbd.log" \
    || die "slurmdbd failed to start (see $DIR/slurmdbd.log)"
  wait_for 30 slurmdbd sacctmgr -n list cluster
  sacctmgr -n -P list cluster format=cluster | grep -qx scalestudy || sacctmgr -i add cluster scalestudy >/dev/null
  alive "$DIR/slurmctld.pid" || slurmctld 2>>"$DIR/slurmctld.log" || die "slurmctld failed (see $DIR/slurmctld.log)"
  wait_for 30 slurmctld scontrol ping
  alive "$DIR/slurmd.pid" || slurmd 2>>"$DIR/slurmd.log" || die "slurmd failed (see $DIR/slurmd.log)"
  wait_for 30 "node $(hostname -s)" sh -c "sinfo -h -N -o %T | grep -Eq '^(idle|mixed|allocated)'"
  log "up: $(sinfo -h -o '%P %D node(s) %c CPUs %T') (state in $DIR)"
}

stop_pid() {  # stop_pid PIDFILE NAME: SIGTERM, then SIGKILL after 10 s
  local pidfile=$1 pid t=0
  alive "$pidfile" || return 0
  pid=$(cat "$pidfile")
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do
    t=$((t + 1))
    [ "$t" -le 50 ] || { log "$2 ignored SIGTERM, killing"; kill -9 "$pid"; break; }
    sleep 0.2
  done
}

stop() {
  need_root
  if [ -f "$DIR/etc/slurm.conf" ] && alive "$DIR/slurmctld.pid"; then
    SLURM_CONF="$DIR/etc/slurm.conf" scancel --full --quiet --partition=local 2>/dev/null || true
  fi
  stop_pid "$DIR/slurmd.pid" slurmd &  # the three stop independently (seconds each): at once
  stop_pid "$DIR/slurmctld.pid" slurmctld &
  stop_pid "$DIR/slurmdbd.pid" slurmdbd &
  wait
  stop_pid "$DIR/db/mysql.pid" mariadbd  # after slurmdbd, its client
  if [ -f "$DIR/started-munge" ]; then stop_pid /run/munge/munged.pid munged; fi
  if [ -L "$CONF_LINK" ] && [ "$(readlink "$CONF_LINK")" = "$DIR/etc/slurm.conf" ]; then rm -f "$CONF_LINK"; fi
  rm -rf "$DIR"
  log "stopped; removed $DIR"
}

status() {
  for pidfile in slurmctld slurmd slurmdbd db/mysql; do
    if alive "$DIR/$pidfile.pid"; then echo "$pidfile: running (pid $(cat "$DIR/$pidfile.pid"))"
    else echo "$pidfile: stopped"; fi
  done
  if [ -f "$DIR/etc/slurm.conf" ]; then SLURM_CONF="$DIR/etc/slurm.conf" sinfo 2>&1 || true; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
