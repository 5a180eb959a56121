#!/usr/bin/env bash
# Start a throw-away single-node SLURM cluster on loopback, for tests/cluster/test_slurm.py.
#
# Debian/Ubuntu only, as root. Installs Debian's munge + SLURM (+ MariaDB and slurmdbd for accounting)
# when missing (slurm_install.sh), then starts every daemon itself (CI has no systemd). Everything it writes lives under
# $SLURM_STATE, except symlinks to its configs in SLURM's compiled-in config folder (/etc/slurm on
# Debian): the slurm-jobstep executor plugin drops SLURM_CONF before its inner `srun`, so the config
# must be found at the default place. An existing config there that is not ours stops the script.
# Stop everything again with slurm_down.sh (same SLURM_STATE).
#
# Knobs (environment variables):
#   SLURM_STATE   folder for configs, keys, sockets, state, logs, pid files (emptied first) [/tmp/fedshift-slurm]
#   PARTITION     name of the one partition (make it the profile's slurm_partition)        [debug]
#   ACCOUNT       account to create in slurmdbd (the profile's slurm_account); "" = none   [""]
#   WITH_DBD      1: MariaDB + slurmdbd, so `sacct` and accounts work as on a real cluster  [1]
#   FAKE_GPUS     advertise this many GPUs (char devices under $SLURM_STATE)                 [2]
#   PORT_BASE     slurmctld PORT_BASE, slurmd +1, slurmdbd +2, MariaDB +3                     [16817]
set -euo pipefail
S=${SLURM_STATE:-/tmp/fedshift-slurm}
PARTITION=${PARTITION:-debug}
ACCOUNT=${ACCOUNT:-}
WITH_DBD=${WITH_DBD:-1}
FAKE_GPUS=${FAKE_GPUS:-2}
PORT=${PORT_BASE:-16817}
START=$SECONDS
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "slurm_up [$((SECONDS - START)) s] $*"; }
die() { echo "slurm_up: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"
command -v dpkg >/dev/null && command -v apt-get >/dev/null || die "needs a Debian/Ubuntu system (dpkg, apt-get)"

mkdir -p "$S"
find "$S" -mindepth 1 -delete
mkdir -p "$S/etc" "$S/spool/ctld" "$S/spool/d" "$S/munge" "$S/log"
cd "$S"
NOISE="$S/log/setup.log"

# ---- packages ---------------------------------------------------------------------------------------
if ! WITH_DBD=$WITH_DBD NOISE=$NOISE bash "$HERE/slurm_install.sh"; then
  die "installing the packages failed; see $NOISE"
fi
ETC=$(dirname "$(dpkg -L slurm-wlm-basic-plugins | grep '/plugstack.conf$' | head -n1)")
[ -d "$ETC" ] || die "cannot find SLURM's config folder (plugstack.conf of slurm-wlm-basic-plugins)"
for f in slurm.conf gres.conf slurmdbd.conf; do
  if [ -e "$ETC/$f" ] || [ -L "$ETC/$f" ]; then
    case "$(readlink "$ETC/$f" || true)" in
      */fedshift-*|"$S"/*) rm -f "$ETC/$f" ;;  # left over by an earlier test cluster
      *) die "$ETC/$f exists and is not from a test cluster: refusing to touch a real SLURM setup" ;;
    esac
  fi
done
say "packages ready ($(dpkg-query -W -f='${Version}' slurmctld))"

# ---- munge: own key and socket ------------------------------------------------------------------------
chown munge:munge "$S/munge"
runuser -u munge -- mungekey -c -k "$S/munge/munge.key"
runuser -u munge -- munged --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
  --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" --seed-file="$S/munge/munged.seed"
munge -S "$S/munge/munge.sock" -n | unmunge -S "$S/munge/munge.sock" >>"$NOISE"
say "munged up"

# ---- configs ---------------------------------------------------------------------------------------------
# At least 4 CPU slots, so that two one-GPU jobs (profiles/slurm asks cpus_per_gpu: 2 each) run side by side as on a
# two-GPU node; on a 2-core machine the slots share the cores (config_overrides keeps slurmd from draining a node
# that declares more CPUs than it has).
CPUS=$(( $(nproc) < 4 ? 4 : $(nproc) ))
MEM_MB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 3 / 4 ))
GRES_NODE=""
if [ "$FAKE_GPUS" -gt 0 ]; then
  # SLURM ignores GPUs without a device file; char devices like /dev/null stand in for them.
  mkdir -p "$S/dev"
  for ((i = 0; i < FAKE_GPUS; i++)); do mknod "$S/dev/nvidia$i" c 1 3; done
  echo "NodeName=localhost Name=gpu File=$S/dev/nvidia[0-$((FAKE_GPUS - 1))]" > "$S/etc/gres.conf"
  GRES_NODE="Gres=gpu:$FAKE_GPUS"
fi
if [ "$WITH_DBD" = 1 ]; then
  ACCOUNTING="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 2))
AccountingStoragePass=$S/munge/munge.sock
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5"
else
  ACCOUNTING="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
cat > "$S/etc/slurm.conf" <<CONF
# Written by fedshift tests/cluster/slurm_up.sh: one node (localhost), loopback only.
ClusterName=fedshiftci
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/spool/ctld
SlurmdSpoolDir=$S/spool/d
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$ACCOUNTING
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdParameters=config_overrides
MpiDefault=none
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB $GRES_NODE State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

# ---- accounting: MariaDB on loopback + slurmdbd ---------------------------------------------------------
if [ "$WITH_DBD" = 1 ]; then
  DB="$S/mysql"
  mkdir -p "$DB" && chown mysql:mysql "$DB"
  mariadb-install-db --user=mysql --datadir="$DB/data" --skip-test-db >>"$NOISE" 2>&1
  mariadbd --no-defaults --user=mysql --datadir="$DB/data" --socket="$DB/mysqld.sock" \
    --bind-address=127.0.0.1 --port=$((PORT + 3)) --pid-file="$DB/mariadbd.pid" \
    --log-error="$S/log/mariadbd.log" --innodb-buffer-pool-size=32M >>"$NOISE" 2>&1 &
  for _ in $(seq 120); do mariadb-admin --socket="$DB/mysqld.sock" ping >>"$NOISE" 2>&1 && break; sleep 0.25; done
  mariadb --socket="$DB/mysqld.sock" -e "CREATE DATABASE slurm_acct_db;
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'fedshift-ci';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  say "mariadbd up"
  cat > "$S/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=slurm
StoragePass=fedshift-ci
StorageLoc=slurm_acct_db
LogFile=$S/log/slurmdbd.log
PidFile=$S/slurmdbd.pid
CONF
  chmod 600 "$S/etc/slurmdbd.conf"
fi

for f in slurm.conf gres.conf slurmdbd.conf; do
  [ -e "$S/etc/$f" ] && ln -s "$S/etc/$f" "$ETC/$f"
done

if [ "$WITH_DBD" = 1 ]; then
  slurmdbd
  for _ in $(seq 120); do sacctmgr -n list cluster >>"$NOISE" 2>&1 && break; sleep 0.25; done
  sacctmgr -i -Q add cluster fedshiftci >>"$NOISE"
  if [ -n "$ACCOUNT" ]; then
    sacctmgr -i -Q add account "$ACCOUNT" Description=ci Organization=ci >>"$NOISE"
    sacctmgr -i -Q add user "$(id -un)" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >>"$NOISE"
  fi
  say "slurmdbd up"
fi

# ---- controller and node -----------------------------------------------------------------------------------
slurmctld
slurmd -N localhost
state=""
for _ in $(seq 120); do
  state=$(sinfo -h -n localhost -o %t 2>>"$NOISE" || true)
  [ "$state" = idle ] && break
  sleep 0.25
done
if [ "$state" != idle ]; then
  sinfo -N -l || true
  tail -n 30 "$S"/log/slurm*.log >&2 || true
  die "node localhost is '$state', not idle"
fi
srun -t 1 true >>"$NOISE" 2>&1 || { tail -n 20 "$NOISE" >&2; die "srun failed; see $S/log"; }
say "cluster ready: partition $PARTITION, $CPUS CPUs, $MEM_MB MB, $FAKE_GPUS GPUs${ACCOUNT:+, account $ACCOUNT}"
