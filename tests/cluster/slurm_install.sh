#!/usr/bin/env bash
# Install Debian's munge + SLURM (+ MariaDB and slurmdbd) for tests/cluster/slurm_up.sh, when missing.
#
# Debian/Ubuntu only, as root; does nothing when every package is installed already. slurm_up.sh runs it first;
# tests/cluster/conftest.py also starts it in the background when a session collects the SLURM test, so that the
# install (minutes on a fresh CI machine) overlaps the other tests instead of adding to them.
#
# Knobs (environment variables):
#   WITH_DBD   1: also MariaDB + slurmdbd (accounting), as slurm_up.sh's WITH_DBD   [1]
#   NOISE      file for apt-get's output                                            [/dev/null]
set -euo pipefail
WITH_DBD=${WITH_DBD:-1}
NOISE=${NOISE:-/dev/null}
[ "$(id -u)" = 0 ] || { echo "slurm_install: must run as root" >&2; exit 1; }
PKGS=(munge slurmctld slurmd slurm-client)
[ "$WITH_DBD" = 1 ] && PKGS+=(slurmdbd mariadb-server)
if dpkg -s "${PKGS[@]}" >>"$NOISE" 2>&1; then
  exit 0
fi
echo "slurm_install: installing ${PKGS[*]}"
export DEBIAN_FRONTEND=noninteractive
# one apt at a time: wait for another apt-get/dpkg holding the lock (e.g. the background install of the tests)
apt-get -o DPkg::Lock::Timeout=900 update -qq >>"$NOISE" 2>&1
apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${PKGS[@]}" >>"$NOISE" 2>&1 \
  || { echo "slurm_install: apt-get install failed; see $NOISE" >&2; exit 1; }
