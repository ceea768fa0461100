#!/bin/sh
# The body of gpuhc's three Slurm shims (healthcheck.sh, prolog.sh, epilog.sh source it with
# $hook set). Slurm starts them as root with almost no environment (no PATH), so set a sane one
# and a umask, then run gpuhc. Honoured: GPUHC_BIN (the gpuhc command; may be
# "python3 -I -m gpuhc", hence unquoted below), GPUHC_CONFIG, GPUHC_STATE_DIR,
# GPUHC_TEXTFILE_DIR (node_exporter's textfile directory, for the shim's own metric).
#
# slurmd throws away a hook's stderr and keeps only its exit code, so a gpuhc that is missing or
# dies before it can say anything (an interpreter gone, a module half-upgraded, a signal) would
# go unnoticed: the shim says it in syslog and in the metric gpuhc_shim_error, which the shipped
# Prometheus rules alert on (docs/slurm.md, "A broken config or a broken gpuhc"). gpuhc's own
# exit codes (0 to 4) are its own words and pass through untouched.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
export PATH
umask 022
# slurmd's working directory may be one others can write (/var/tmp when it has no other), and
# `python3 -m` imports from the working directory first: root runs nothing from where it stands
# (docs/security.md).
cd /
textfile_dir=${GPUHC_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
metric=$textfile_dir/gpuhc-shim-$hook.prom

shim_error() {  # $1: what went wrong, in words
    echo "gpuhc $hook: $1" >&2
    logger -t gpuhc -p daemon.err "$hook shim: $1" 2>/dev/null
    # Written whole and renamed into place; only into a directory that is root's alone.
    if [ -d "$textfile_dir" ] && [ "$(stat -c %u "$textfile_dir" 2>/dev/null)" = 0 ] &&
            [ -z "$(find "$textfile_dir" -maxdepth 0 -perm /022 2>/dev/null)" ]; then
        tmp=$textfile_dir/.gpuhc-shim-$hook.$$.tmp
        { echo "# HELP gpuhc_shim_error 1 when a Slurm hook's shim could not run gpuhc, or gpuhc died without a word"
          echo "# TYPE gpuhc_shim_error gauge"
          echo "gpuhc_shim_error{hook=\"$hook\",error=\"$2\"} 1"; } > "$tmp" 2>/dev/null && mv -f "$tmp" "$metric"
    fi
}

if [ -z "${GPUHC_BIN:-}" ]; then
    GPUHC_BIN=$(command -v gpuhc 2>/dev/null) || GPUHC_BIN=/usr/local/bin/gpuhc
fi
if ! command -v "${GPUHC_BIN%% *}" >/dev/null 2>&1; then
    shim_error "$GPUHC_BIN not found: no checks" missing
    # A missing gpuhc is gpuhc's fault, not the node's: a prolog or epilog fails open (exit 0)
    # instead of letting Slurm drain the node and hold the job with "Prolog error".
    [ "$hook" = healthcheck ] && exit 3
    exit 0
fi
# shellcheck disable=SC2086
$GPUHC_BIN "$hook" "$@"
rc=$?
case $rc in
    0|1|2|3|4) [ ! -e "$metric" ] || rm -f "$metric" ;;
    *) shim_error "$GPUHC_BIN $hook died with exit status $rc (gpuhc's own codes are 0 to 4)" "exit $rc"
       [ "$hook" = healthcheck ] || rc=0 ;;
esac
exit $rc
