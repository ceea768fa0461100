#!/usr/bin/env bash
# The whole test suite, from a fresh machine: README.md's test command, and what .ci/run calls.
# Installs what the tests need (Debian's Slurm and munge, gpuhc with its test extras), then runs
# pytest. The `slurm` tests start their own munged/slurmctld/slurmd on localhost and stop them.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in slurmctld slurmd slurm-client munge; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: missing ${need[*]}; run as root or: apt-get install ${need[*]}" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# CI installs the versions the suite last passed with (tests/constraints.txt), so a library's
# new release cannot break a submission overnight. `--latest` takes the newest releases
# instead, by hand, so that drift shows up as a named test failure before the pins move.
constraints=(-c tests/constraints.txt)
if [ "${1:-}" = "--latest" ]; then
  shift
  constraints=(--upgrade --upgrade-strategy eager)
fi
python3 -m pip install -q --disable-pip-version-check "${constraints[@]}" -e '.[test]'
exec python3 -m pytest -q "$@"
