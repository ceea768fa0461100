#!/bin/sh
# Build (once) a Debian chroot holding one Slurm release, for the real-Slurm test matrix.
#   tests/matrix/build-chroot.sh SUITE [ROOT]
# SUITE is a Debian suite (trixie: Slurm 24.11, sid: Slurm 26.05, bookworm: 22.05).
# ROOT defaults to $GPUHC_CHROOT_CACHE/SUITE (/var/cache/gpuhc-test/chroots/SUITE). An existing
# ROOT is kept as it is: CI builds each chroot once; delete the directory to rebuild it.
# Built into ROOT.tmp.PID and renamed at the end, so an interrupted build never passes for done.
# One build at a time per ROOT (flock on ROOT.lock, as tests/helpers/debian_root.py does): the
# lock's holder removes the ROOT.tmp.* that a build killed outright (SIGKILL, a reboot) left.
set -eu
suite=${1:?usage: build-chroot.sh SUITE [ROOT]}
cache=${GPUHC_CHROOT_CACHE:-/var/cache/gpuhc-test/chroots}
root=${2:-$cache/$suite}
mirror=${GPUHC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ -x "$root/usr/sbin/slurmctld" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "build-chroot.sh: must run as root to build $root" >&2
    exit 2
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends mmdebstrap >&2
fi
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9  # released when this shell exits, however it dies
if [ -x "$root/usr/sbin/slurmctld" ]; then
    exit 0  # another build finished it while this one waited
fi
# --one-file-system: an interrupted mmdebstrap may leave /proc or /dev mounted in its target,
# and rm must not reach through them into the host's.
for stale in "$root".tmp.*; do
    if [ -d "$stale" ]; then
        rm -rf --one-file-system "$stale"
    fi
done
tmp="$root.tmp.$$"
trap 'rm -rf --one-file-system "$tmp"' EXIT
# dash runs the EXIT trap on exit, not on a signal: each signal exits, and the exit cleans up.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
# Check-Valid-Until off: a mirror (or a clock) a few days out must not fail CI; the archive's
# signatures are still checked.
# minbase + Slurm's daemons and clients + munge: nothing else (no python: gpuhc runs on the
# host, see tests/matrix/chroot.py). No recommends: the test cluster needs no mail or docs.
mmdebstrap --quiet --variant=minbase --mode=root --aptopt='APT::Install-Recommends "false"' \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=slurmctld,slurmd,slurm-client,munge,procps \
    "$suite" "$tmp" "$mirror" >&2
mv "$tmp" "$root"
trap - EXIT
