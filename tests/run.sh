#!/usr/bin/env bash
# The whole test suite, from a fresh machine: README.md's test command, and what .ci/run calls.
#   bash tests/run.sh [--latest] [--slurm-all] [pytest arguments]
# Installs what the tests need (Debian's Slurm and munge; gpuhc with its test extras in the
# virtual environment .venv, made by install.sh: Debian 12's and Ubuntu 24.04's python3 refuse
# `pip install` into the system, PEP 668), then runs pytest. The `slurm` tests start their own
# munged/slurmctld/slurmd on localhost and stop them.
#   --slurm-all  run the `slurm` tests on every Slurm of the matrix (22.05, 24.11, 26.05): the
#                releases the host lacks run in Debian chroots built once with mmdebstrap
#                (tests/matrix/build-chroot.sh, cached in /var/cache/gpuhc-test/chroots).
#   --latest     newest releases of the Python dependencies instead of tests/constraints.txt.
#   --busy N     keep N cores busy (one spinning process each, at the tests' own priority) while
#                the tests run: the suite must pass on a loaded machine, since CI's 2 cores are
#                not always idle. Use it before calling done any change to real-Slurm or MPI tests.
set -euo pipefail
cd "$(dirname "$0")/.."

latest=() slurm=() busy=0
while [ $# -gt 0 ]; do
  case $1 in
    --latest) latest=(--latest); shift ;;
    --slurm-all) slurm=(--slurm=all); shift ;;
    --busy)
      case ${2:-} in
        ''|*[!0-9]*) echo "tests/run.sh: --busy needs a number of cores (e.g. --busy 2), got '${2:-}'" >&2; exit 2 ;;
      esac
      busy=$2; shift 2 ;;
    *) break ;;
  esac
done

need=()
# slurmdbd + MariaDB: real accounting for the fleet tests; prometheus: promtool checks the alert rules;
# iproute2: `ip` for the storm test's private network namespace (not on every minimal image);
# python3-venv: install.sh's .venv (stock Debian's python3 comes without ensurepip)
# gcc: the real-kernel test compiles the crashing program whose file name forges a driver line
for pkg in slurmctld slurmd slurm-client munge slurmdbd mariadb-server prometheus iproute2 python3-venv gcc; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#slurm[@]} -gt 0 ]; then
  dpkg -s mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: missing ${need[*]}; run as root or: apt-get install ${need[*]}" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# CI installs the versions the suite last passed with (tests/constraints.txt, install.sh's
# default), so a library's new release cannot break a submission overnight. `--latest` takes
# the newest releases instead, by hand, so that drift shows up as a named test failure first.
sh install.sh --venv .venv --gpu none --extras test --editable "${latest[@]}"
if [ ${#slurm[@]} -gt 0 ]; then
  for suite in trixie sid; do  # once per machine; printed so CI logs show what it cost
    start=$(date +%s)
    sh tests/matrix/build-chroot.sh "$suite"
    echo "tests/run.sh: chroot $suite ready in $(( $(date +%s) - start )) s"
  done
fi
# Two parts. First everything not marked `serial`, on several workers (pytest-xdist): most of
# the time goes to real-Slurm tests that wait on daemons, not to the CPU, so 4 workers on CI's 2
# cores take about half the time of one; tests that share a module's cluster stay together on
# one worker (tests/conftest.py). Then the `serial` tests, alone: they compare timings (the
# campaign's model against real Slurm, the storm's probes), which a busy machine would skew.
# GPUHC_TEST_WORKERS=0 runs the first part serially too. Exit status: the first failure's.
workers=(-n "${GPUHC_TEST_WORKERS:-4}" --dist loadgroup)
[ "${GPUHC_TEST_WORKERS:-4}" != 0 ] || workers=()
# A caller's own `-m EXPR` is joined to each part's (pytest keeps only the last -m it is given,
# so passing it through would replace the split, and the serial tests would run twice).
user_m=""; rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) [ $# -ge 2 ] || { echo "tests/run.sh: -m needs an expression" >&2; exit 2; }; user_m="$2"; shift 2 ;;
    -m?*) user_m="${1#-m}"; shift ;;
    *) rest+=("$1"); shift ;;
  esac
done
# The `gpu` tests need an NVIDIA GPU and skip without one: on a machine with none (CI) they are
# left out by their marker, said once here, rather than reported as skipped tests. Run them on a
# GPU machine (`pytest -m gpu`, docs/verification.md names each run).
if [ -e /dev/nvidiactl ] || nvidia-smi -L >/dev/null 2>&1; then
  gpu_m=""
else
  gpu_m="not gpu"
  echo "tests/run.sh: no NVIDIA GPU here: the tests marked gpu are left out (run them with -m gpu on a GPU machine)"
fi
both() {
  local m="$1"
  [ -z "$gpu_m" ] || m="$gpu_m and $m"
  if [ -n "$user_m" ]; then echo "($user_m) and $m"; else echo "$m"; fi
}
spinners=()
stop_spinners() { [ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}" 2>/dev/null || true; }
trap stop_spinners EXIT
trap 'stop_spinners; exit 130' INT TERM
for _ in $(seq 1 "$busy"); do
  sh -c 'while :; do :; done' &
  spinners+=($!)
done
[ "$busy" = 0 ] || echo "tests/run.sh: $busy spinning process(es) keep $busy core(s) busy: ${spinners[*]}"
rc=0
.venv/bin/python -m pytest -q "${workers[@]}" "${slurm[@]}" -m "$(both "not serial")" "${rest[@]}" || { r=$?; [ "$r" = 5 ] || rc=$r; }
.venv/bin/python -m pytest -q "${slurm[@]}" -m "$(both serial)" "${rest[@]}" || { r=$?; [ "$r" = 5 ] || [ "$rc" != 0 ] || rc=$r; }
exit "$rc"  # 5 (nothing collected) in a part: none of the selected tests belongs to it, which is fine
