#!/bin/sh
# Remove gpuhc from a node or the admin host: everything install.sh and the README's install
# steps put there (README, "Uninstall"). install.sh copies this file to
# /usr/local/share/gpuhc/uninstall.sh, so it runs without the checkout.
#
#   sh uninstall.sh            # gpuhc's programs, units, shims, links, metrics; keeps what is the site's
#   sh uninstall.sh --purge    # also the config, the state (post-mortem and retire bundles), the logs
#                              # and the sweep's user
#
# Options: --prefix DIR and --textfile-dir DIR, as given to install.sh.
#
# Kept without --purge, and why: /etc/gpuhc (the site's config, edited by hand), /var/lib/gpuhc
# (post-mortem and retire bundles an RMA may still need; the drain memory a reinstall picks up),
# the log directory (the audit trail of every drain and resume), the user gpuhc (owns the sweep's
# files). Take the Slurm lines out first: a Prolog that no longer exists fails every job start.
set -eu
prefix=/opt/gpuhc
textfile_dir=/var/lib/prometheus/node-exporter
purge=
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
        --textfile-dir) textfile_dir=${2:?--textfile-dir needs a directory}; shift 2 ;;
        --purge) purge=1; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "uninstall.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "uninstall.sh: run it as root" >&2; exit 2; }

# The units the README's steps enable, stopped before their programs go.
units="gpuhc-sweep.timer gpuhc-sweep.service gpuhc-retest.service gpuhc-watch.service"
if [ -d /run/systemd/system ]; then
    # shellcheck disable=SC2086
    systemctl disable --now $units 2>/dev/null || true
fi
for unit in $units; do
    rm -f "/etc/systemd/system/$unit"
done
[ ! -d /run/systemd/system ] || systemctl daemon-reload 2>/dev/null || true

rm -rf "$prefix" "$prefix.releases" /usr/local/share/gpuhc /run/gpuhc /var/cache/gpuhc
# The link only where it is install.sh's (a gpuhc of another origin stays).
case $(readlink /usr/local/bin/gpuhc 2>/dev/null) in "$prefix"/*) rm -f /usr/local/bin/gpuhc ;; esac
rm -f /usr/local/sbin/gpuhc-slack-webhook /etc/tmpfiles.d/gpuhc.conf /etc/tmpfiles.d/gpuhc-sweep.conf \
    /etc/logrotate.d/gpuhc /etc/cron.d/gpuhc-sweep /usr/share/bash-completion/completions/gpuhc \
    /usr/local/share/man/man1/gpuhc.1
rm -f "$textfile_dir"/gpuhc*.prom
echo "uninstall.sh: removed gpuhc's programs, units, shims, links and metrics"

logdirs=$(for d in /var/log/gpuhc /var/lib/gpuhc/log; do if [ -e "$d" ]; then echo "$d"; fi; done)
if [ -n "$purge" ]; then
    rm -rf /etc/gpuhc /var/lib/gpuhc /var/log/gpuhc
    if getent passwd gpuhc >/dev/null; then userdel gpuhc; fi
    getent group gpuhc >/dev/null && groupdel gpuhc 2>/dev/null || true
    echo "uninstall.sh: --purge: removed /etc/gpuhc, /var/lib/gpuhc, the logs and the user gpuhc"
    exit 0
fi
kept=
[ ! -e /etc/gpuhc ] || kept="$kept
  /etc/gpuhc: the site's config"
[ ! -e /var/lib/gpuhc ] || kept="$kept
  /var/lib/gpuhc: state, post-mortem and retire bundles (an RMA may still need them)"
for d in $logdirs; do
    case $d in /var/lib/gpuhc/*) ;; *) kept="$kept
  $d: the logs of every drain and resume" ;; esac
done
! getent passwd gpuhc >/dev/null || kept="$kept
  the user gpuhc: owns the sweep's files"
if [ -n "$kept" ]; then
    echo "uninstall.sh: kept on purpose (sh uninstall.sh --purge removes them):$kept"
fi
echo "uninstall.sh: a drain gpuhc set stays in Slurm until you resume the node"
