#!/bin/sh
# gpuhc epilog shim. Slurm Epilog: checks after the job; post-mortem bundle when the job failed; drains on failure.
# The body is shim.sh beside this file (the environment, the checks' run, a loud word when gpuhc
# cannot run).
hook=epilog
. "$(dirname "$0")/shim.sh"
