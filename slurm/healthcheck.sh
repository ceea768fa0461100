#!/bin/sh
# gpuhc healthcheck shim. Slurm HealthCheckProgram: passive checks; drains/resumes this node itself (slurmd only logs our exit code and kills us at 60 s).
# The body is shim.sh beside this file (the environment, the checks' run, a loud word when gpuhc
# cannot run).
hook=healthcheck
. "$(dirname "$0")/shim.sh"
