#!/bin/sh
# gpuhc prolog shim. Slurm Prolog: checks the job's GPUs; on a hardware failure drains with gpuhc's reason and exits 1 so Slurm requeues the job.
# The body is shim.sh beside this file (the environment, the checks' run, a loud word when gpuhc
# cannot run).
hook=prolog
. "$(dirname "$0")/shim.sh"
