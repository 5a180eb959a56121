#!/usr/bin/env bash
# Stop the cluster of slurm_up.sh (same SLURM_STATE): cancel its jobs, stop each daemon by its pid
# file in reverse start order (TERM, then KILL after 15 s), and remove the config symlinks.
# Safe to run twice or after a failed start; always exits 0.
set -u
S=${SLURM_STATE:-/tmp/fedshift-slurm}
[ -d "$S" ] || exit 0
NOISE="$S/log/teardown.log"
mkdir -p "$S/log"
if [ -s "$S/slurmctld.pid" ] && kill -0 "$(cat "$S/slurmctld.pid")" 2>>"$NOISE"; then
  timeout 20 scancel --user="$(id -un)" >>"$NOISE" 2>&1
fi
stop() {  # stop NAME PIDFILE
  local pid
  [ -s "$2" ] || return 0
  pid=$(cat "$2")
  kill -0 "$pid" 2>>"$NOISE" || return 0
  kill -TERM "$pid"
  for _ in $(seq 60); do
    kill -0 "$pid" 2>>"$NOISE" || { echo "slurm_down: stopped $1 ($pid)"; return 0; }
    sleep 0.25
  done
  echo "slurm_down: $1 ($pid) ignored TERM for 15 s; killing it"
  kill -KILL "$pid" 2>>"$NOISE"
}
stop slurmd "$S/slurmd.pid"
stop slurmctld "$S/slurmctld.pid"
stop slurmdbd "$S/slurmdbd.pid"
stop mariadbd "$S/mysql/mariadbd.pid"
stop munged "$S/munge/munged.pid"
if ETC=$(dirname "$(dpkg -L slurm-wlm-basic-plugins 2>>"$NOISE" | grep '/plugstack.conf$' | head -n1)"); then
  for f in slurm.conf gres.conf slurmdbd.conf; do
    [ "$(readlink "$ETC/$f" 2>>"$NOISE")" = "$S/etc/$f" ] && rm -f "$ETC/$f"
  done
fi
exit 0
