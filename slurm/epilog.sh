#!/bin/sh
# gpuhc epilog shim. Slurm Epilog: checks after the job; post-mortem bundle when the job failed; drains on failure.
# Slurm starts this as root with almost no environment (no PATH), so set a sane one and a umask,
# then hand over to gpuhc. Honoured: GPUHC_BIN (the gpuhc command; may be "python3 -I -m gpuhc",
# hence unquoted below), GPUHC_CONFIG, GPUHC_STATE_DIR.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
export PATH
umask 022
# slurmd's working directory may be one others can write (/var/tmp when it has no other), and
# `python3 -m` imports from the working directory first: root runs nothing from where it stands
# (docs/security.md).
cd /
if [ -z "${GPUHC_BIN:-}" ]; then
    GPUHC_BIN=$(command -v gpuhc 2>/dev/null) || GPUHC_BIN=/usr/local/bin/gpuhc
fi
# A missing gpuhc is gpuhc's fault, not the node's: fail open (exit 0) instead of letting Slurm
# drain the node and hold the job with "Epilog error".
if ! command -v "${GPUHC_BIN%% *}" >/dev/null 2>&1; then
    echo "gpuhc epilog: $GPUHC_BIN not found: skipping the checks" >&2
    logger -t gpuhc -p daemon.warning "epilog: $GPUHC_BIN not found: skipping the checks" 2>/dev/null
    exit 0
fi
# shellcheck disable=SC2086
exec $GPUHC_BIN epilog "$@"
