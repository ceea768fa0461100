#!/bin/sh
# Install gpuhc from this checkout into its own virtual environment (README.md, "Install").
#
#   sh install.sh                    # as root, on a GPU node: /opt/gpuhc + links + shims + config
#   sh install.sh --venv DIR [...]   # only a virtual environment at DIR (no root, nothing else)
#   sh install.sh --admin-host       # the node install, plus the sweep's account, directories and timer
#
# Why a venv: Debian 12 and Ubuntu 24.04 mark their python3 "externally managed" (PEP 668), so
# `pip install` into it fails, and gpuhc's dependencies (nvidia-ml-py, CuPy) are not all packaged
# by the distributions. A venv under /opt/gpuhc keeps gpuhc and its pinned dependencies away from
# the system's Python packages, survives distribution upgrades of them, and is removed with one
# `rm -rf` (plus the links below). The distribution's own python3 runs it.
#
# Options:
#   --prefix DIR     where the node install goes (default /opt/gpuhc)
#   --venv DIR       only create/refresh a venv at DIR with gpuhc in it; no system files
#   --gpu WHICH      the CuPy extra: auto (default: from the NVIDIA driver's CUDA version),
#                    none, cuda12 or cuda13
#   --extras LIST    more extras, comma-separated (e.g. test)
#   --editable       install the checkout in development mode (pip -e)
#   --wheels DIR     install from wheels in DIR only (offline nodes: README, "Offline nodes")
#   --download DIR   only download gpuhc's dependencies and build tools into DIR, for --wheels
#                    on offline nodes of this machine's distribution (through a temporary venv:
#                    no system pip needed, nothing written into the checkout)
#   --admin-host     also set up the fabric sweep (README, "systemd timer or cron"): the system
#                    user gpuhc, its state directory and log, and the systemd timer (the cron
#                    file where systemd is not running)
#   --textfile-dir DIR  node_exporter's textfile directory for the new config (default: Debian's
#                    /var/lib/prometheus/node-exporter)
#   --latest         ignore tests/constraints.txt (the pinned versions) and take the newest
# Environment: PYTHON, the interpreter to use (default python3; RHEL 9: python3.11). pip's own
#   variables pass through: HTTPS_PROXY (a proxy), PIP_INDEX_URL (a mirror of PyPI), PIP_CERT (the
#   CA of a proxy that re-signs TLS; default: the system's CA bundle); README, "Proxies and mirrors".
set -eu

here=$(cd "$(dirname "$0")" && pwd)
prefix=/opt/gpuhc
venv=
gpu=auto
extras=
editable=
wheels=
download=
admin=
textfile_dir=/var/lib/prometheus/node-exporter
constraints="-c $here/tests/constraints.txt"

die() { echo "install.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
        --venv) venv=${2:?--venv needs a directory}; shift 2 ;;
        --gpu) gpu=${2:?--gpu needs auto, none, cuda12 or cuda13}; shift 2 ;;
        --extras) extras=${2:?--extras needs a list}; shift 2 ;;
        --editable) editable=-e; shift ;;
        --wheels) wheels=${2:?--wheels needs a directory}; shift 2 ;;
        --download) download=${2:?--download needs a directory}; shift 2 ;;
        --latest) constraints="--upgrade --upgrade-strategy eager"; shift ;;
        --admin-host) admin=1; shift ;;
        --textfile-dir) textfile_dir=${2:?--textfile-dir needs a directory}; shift 2 ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

# The CUDA major version the NVIDIA driver supports: nvidia-smi's banner says "CUDA Version:
# 12.4"; without nvidia-smi, libcuda's version (libcuda.so.575.57.08 -> driver 575 -> CUDA 12).
# No driver: no CuPy (the passive checks need only NVML; active checks then say "no CuPy").
libcuda_dirs="/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu"
cuda_major() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        v=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -n 1)
        [ -n "$v" ] && { echo "$v"; return; }
    fi
    for lib in $(for d in $libcuda_dirs; do echo "$d"/libcuda.so.*; done); do
        [ -e "$lib" ] || continue
        drv=${lib##*libcuda.so.}
        drv=${drv%%.*}
        case $drv in ''|*[!0-9]*) continue ;; esac
        # CUDA 13 needs driver 580 or newer, CUDA 12 525 or newer (NVIDIA's CUDA release notes).
        if [ "$drv" -ge 580 ]; then echo 13; elif [ "$drv" -ge 525 ]; then echo 12; fi
        return
    done
}

if [ "$gpu" = auto ]; then
    case $(cuda_major) in
        13) gpu=cuda13 ;;
        12) gpu=cuda12 ;;
        '') gpu=none ;;
        *) echo "install.sh: the driver's CUDA is older than 12: no CuPy (active checks off)" >&2; gpu=none ;;
    esac
fi
case $gpu in
    none) ;;
    cuda12) extras=${extras:+$extras,}gpu ;;
    cuda13) extras=${extras:+$extras,}gpu-cuda13 ;;
    *) die "--gpu must be auto, none, cuda12 or cuda13, not $gpu" ;;
esac

# Why pip failed, in words, where its own output buries it: behind a proxy that re-signs TLS,
# pip's build of gpuhc reads as "Could not find a version that satisfies the requirement
# setuptools" (the TLS error stays inside pip's build subprocess, unprinted), while the cause
# is a certificate it does not trust. So the index is asked once more, directly, the way pip
# asks it (its URL, the proxy variables, PIP_CERT), and the answer named (README, "Proxies and mirrors").
index_problem() {
    [ -z "$wheels" ] || return 0
    "$python" - <<'PY' 2>/dev/null
import os, ssl, urllib.error, urllib.request
url = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/"
ctx = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
try:
    urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15, context=ctx).close()
except urllib.error.HTTPError:
    pass  # an answer: the index is reachable
except Exception as e:
    why = getattr(e, "reason", e)
    if isinstance(why, ssl.SSLError):
        print(f"TLS to {url} failed (certificate not trusted: {getattr(why, 'verify_message', None) or why}): a proxy that re-signs TLS "
              "needs its CA in PIP_CERT=/path/to/ca.pem, or use a mirror, PIP_INDEX_URL=...")
    elif "proxy" in str(why).lower() or "Tunnel" in str(why):
        print(f"the proxy for {url} failed ({why}; HTTPS_PROXY={os.environ.get('HTTPS_PROXY') or os.environ.get('https_proxy')})")
    else:
        print(f"the package index {url} cannot be reached ({why}): no network? set HTTPS_PROXY or "
              "PIP_INDEX_URL, or install offline with --wheels (README, \"Offline nodes\")")
PY
}
pip_failed() {
    if grep -q 'CERTIFICATE_VERIFY_FAILED' "$pip_log"; then
        die "pip failed: TLS to the package index failed (a certificate not trusted by ${PIP_CERT:-pip's own CA list}):" \
            "a proxy that re-signs TLS needs its CA in PIP_CERT=/path/to/ca.pem, or use a mirror, PIP_INDEX_URL=...;" \
            "README, \"Proxies and mirrors\""
    fi
    # Only where pip found nothing at all: a conflict or a build error is pip's own to tell.
    grep -q 'No matching distribution\|from versions: none\|Retrying\|NewConnectionError' "$pip_log" ||
        die "pip failed (its output is above)"
    why=$(index_problem)
    [ -z "$why" ] || die "pip failed: $why; README, \"Proxies and mirrors\""
    die "pip failed (its output is above)"
}

# The build's name for --version: the checkout's commit where git knows it, else the tarball's
# name; written into the copy that is built, never into the checkout.
build_stamp() {
    commit=$(git -C "$here" describe --always --dirty --abbrev=12 2>/dev/null) || commit=
    printf '"""Written by install.sh: the build this installation came from."""\nBUILD = "%s"\n' \
        "${commit:+commit $commit, }built $(date -u +%Y-%m-%d) from $here" > "$1"
}

# pip in a venv trusts only its own CA list (certifi's), where Debian's and RHEL's own pip trust
# the system's: behind a proxy that re-signs TLS with a CA the system was given, the venv's pip
# would refuse what the system's accepts. So, unless PIP_CERT says otherwise, the system's bundle.
if [ -z "${PIP_CERT:-}" ]; then
    for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
        if [ -s "$ca" ]; then PIP_CERT=$ca; export PIP_CERT; break; fi
    done
fi

# PYTHON names another interpreter (RHEL 9: PYTHON=python3.11, README "Offline nodes").
python=$(command -v "${PYTHON:-python3}") || die "${PYTHON:-python3} not found (apt-get install python3)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$python is older than 3.10, which gpuhc needs (RHEL 9: dnf install python3.11 python3.11-pip; PYTHON=python3.11 sh install.sh)"

# A venv with pip when the distribution ships ensurepip (python3-venv); otherwise one without
# pip, filled by the system's pip through --python (Debian's python3-pip without python3-venv).
# ensurepip is asked first: without it Debian's venv prints a long "ensurepip is not available"
# error before failing, which on this path that then succeeds would only alarm.
#
# A venv already there is reused only when it is whole: its python runs and is the same Python
# as the one chosen here, pip can fill it, and no earlier run of this script stopped half-way
# (the marker file below is made before any change and removed at the end). Anything else is
# rebuilt, saying why. A venv this run made is removed again when the run fails; one that was
# there keeps its marker, so that the next run rebuilds it.
marker=.gpuhc-install-incomplete
made_venv=
has_pip() { "$1" -m pip --version >/dev/null 2>&1; }
venv_problem() {
    [ -e "$1/$marker" ] && { echo "an earlier install.sh run stopped before it finished"; return; }
    [ -x "$1/bin/python" ] && "$1/bin/python" -c '' 2>/dev/null || { echo "its python does not run"; return; }
    want=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    have=$("$1/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$want" = "$have" ] || { echo "it runs Python $have, not $python's $want"; return; }
    has_pip "$1/bin/python" || has_pip "$python" || echo "it has no pip, and $python has none to lend it"
}
make_venv() {
    if [ -e "$1" ] || [ -L "$1" ]; then
        if [ ! -e "$1/pyvenv.cfg" ]; then
            [ -d "$1" ] && [ -z "$(ls -A "$1")" ] || die "$1 exists and is not a virtual environment: move it away or choose another directory"
        else
            why=$(venv_problem "$1")
            if [ -z "$why" ]; then
                touch "$1/$marker"
                pip="$1/bin/python -m pip"
                has_pip "$1/bin/python" || pip="$python -m pip --python $1/bin/python"
                return
            fi
            echo "install.sh: $1 is a broken virtual environment ($why): rebuilding it" >&2
        fi
        rm -rf "$1"
    fi
    made_venv=1
    if "$python" -c 'import ensurepip' >/dev/null 2>&1 && "$python" -m venv "$1"; then
        pip="$1/bin/python -m pip"
    elif has_pip "$python" && rm -rf "$1" && "$python" -m venv --without-pip "$1"; then
        pip="$python -m pip --python $1/bin/python"
    else
        die "cannot make a virtual environment with pip in $1: $python has neither ensurepip nor pip" \
            "(Debian, Ubuntu: apt-get install python3-venv; RHEL: dnf install python3.11-pip)"
    fi
    touch "$1/$marker"
}

target=${venv:-$prefix}
if [ -n "$download" ]; then
    mkdir -p "$download"
    download=$(cd "$download" && pwd)
    target=$(mktemp -d "${TMPDIR:-/tmp}/gpuhc-download.XXXXXX")/venv
elif [ -z "$venv" ] && [ "$(id -u)" -ne 0 ]; then
    die "a node install writes $prefix, /usr/local and /etc: run it as root (or use --venv DIR)"
fi
src_dir=
pip_log=$(mktemp "${TMPDIR:-/tmp}/gpuhc-pip.XXXXXX")
# On any exit: the temporary files go; a venv this run made goes too unless the run finished.
finish() {
    rc=$?
    rm -f "$pip_log"
    [ -z "$src_dir" ] || [ "$src_dir" = "$here" ] || rm -rf "$src_dir"
    [ -z "$download" ] || rm -rf "$(dirname "$target")"
    if [ "$rc" -ne 0 ] && [ -n "$made_venv" ] && [ -e "$target/$marker" ]; then
        rm -rf "$target"
        echo "install.sh: removed the unfinished virtual environment $target" >&2
    fi
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM HUP
make_venv "$target"
# Built from a copy: pip's build writes gpuhc.egg-info next to pyproject.toml, which fails in a
# read-only checkout (a shared or mounted one) and would leave files behind in a writable one.
src_dir=$here
if [ -z "$editable" ]; then
    src_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpuhc-build.XXXXXX")
    cp -R "$here/pyproject.toml" "$here/README.md" "$here/gpuhc" "$src_dir/"
    build_stamp "$src_dir/gpuhc/_build.py"
fi
spec=$src_dir${extras:+[$extras]}
if [ -n "$download" ]; then
    # What builds gpuhc and python-hostlist (published as source only) on the node comes too.
    # shellcheck disable=SC2086
    if ! $pip download -q --disable-pip-version-check -d "$download" $constraints 'setuptools>=68' wheel "$spec" \
            2>"$pip_log"; then
        cat "$pip_log" >&2
        pip_failed
    fi
    rm -f "$download"/gpuhc-*  # gpuhc itself is built on the node, from the checkout
    echo "install.sh: $(ls "$download" | wc -l) files in $download (extras: ${extras:-none}); on the node: sh install.sh --wheels DIR"
    exit 0
fi
src=${wheels:+--no-index --find-links $wheels}
# shellcheck disable=SC2086  # word splitting of the option lists is intended
# A node install keeps no pip cache in root's home: nothing outside what "Uninstall" removes.
nocache=
[ -n "$venv" ] || nocache=--no-cache-dir
if ! $pip install -q --disable-pip-version-check $nocache $src $constraints $editable "$spec" 2>"$pip_log"; then
    cat "$pip_log" >&2
    pip_failed
fi
cat "$pip_log" >&2
rm -f "$target/$marker"
echo "install.sh: gpuhc in $target (extras: ${extras:-none}; $("$target/bin/gpuhc" --version 2>/dev/null))"
[ -n "$venv" ] && exit 0

# ------------------------------------------------------------------ node install (root)
umask 022
# Where the logs go. As root gpuhc appends only inside directories root alone can write
# (docs/slurm.md, "What each run does"): /var/log/gpuhc where /var/log is root's and not
# group-writable (Debian), /var/lib/gpuhc/log where it is (Ubuntu: root:syslog 0775). Every
# file installed below that names a log directory is written with the one chosen here.
logdir=/var/log/gpuhc
if [ "$(stat -c %u /var/log)" != 0 ] || [ -n "$(find /var/log -maxdepth 0 -perm /022)" ]; then
    logdir=/var/lib/gpuhc/log
fi
layout() {
    sed -e "s|/var/log/gpuhc|$logdir|g" -e "s|/var/lib/prometheus/node-exporter|$textfile_dir|g" "$1"
}
install -d -m 0755 /usr/local/bin /usr/local/sbin /usr/local/share/gpuhc/slurm /etc/gpuhc
ln -sfn "$prefix/bin/gpuhc" /usr/local/bin/gpuhc
# The shims name the textfile directory for their own metric (slurm/shim.sh).
for shim in healthcheck.sh prolog.sh epilog.sh shim.sh; do
    layout "$here/slurm/$shim" > "/usr/local/share/gpuhc/slurm/.$shim.new"
    chmod 0755 "/usr/local/share/gpuhc/slurm/.$shim.new"
    mv -f "/usr/local/share/gpuhc/slurm/.$shim.new" "/usr/local/share/gpuhc/slurm/$shim"
done
# The hooks example under the name the config's example and docs/repair.md give it.
install -m 0755 "$here/examples/hooks/slack-webhook.py" /usr/local/sbin/gpuhc-slack-webhook
# The scenarios site test mode replays (README, "Try it under Slurm without GPUs").
install -d -m 0755 /usr/local/share/gpuhc/scenarios
install -m 0644 "$here"/examples/scenarios/*.yaml /usr/local/share/gpuhc/scenarios/
if [ ! -e /etc/gpuhc/gpuhc.yaml ]; then  # never overwrite an edited config
    layout "$here/etc/gpuhc.yaml" > /etc/gpuhc/gpuhc.yaml.new
    chmod 0644 /etc/gpuhc/gpuhc.yaml.new && mv /etc/gpuhc/gpuhc.yaml.new /etc/gpuhc/gpuhc.yaml
    echo "install.sh: /etc/gpuhc/gpuhc.yaml: logs in $logdir, metrics in $textfile_dir"
fi
# Directories gpuhc writes (state, logs; /run/gpuhc is re-made at every boot by tmpfiles.d).
install -d -m 0755 /etc/tmpfiles.d /etc/logrotate.d /usr/share/bash-completion/completions
layout "$here/examples/tmpfiles.d/gpuhc.conf" > /etc/tmpfiles.d/gpuhc.conf
layout "$here/examples/logrotate.d/gpuhc" > /etc/logrotate.d/gpuhc
if command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create /etc/tmpfiles.d/gpuhc.conf || true
else
    install -d -m 0755 /var/lib/gpuhc "$logdir" /run/gpuhc
    install -d -m 0700 /var/lib/gpuhc/postmortem
fi
# Shell completion (click's own): bash picks it up from this directory.
_GPUHC_COMPLETE=bash_source "$prefix/bin/gpuhc" > /usr/share/bash-completion/completions/gpuhc
# The Prometheus rules and the Grafana dashboard on gpuhc's metrics (README, "After the drain").
install -d -m 0755 /usr/local/share/gpuhc/alerting
install -m 0644 "$here/examples/alerting/gpuhc-rules.yml" "$here/examples/alerting/grafana-dashboard.json" \
    /usr/local/share/gpuhc/alerting/
install -d -m 0755 /usr/local/share/gpuhc/systemd
install -m 0644 "$here"/examples/systemd/*.service "$here"/examples/systemd/*.timer /usr/local/share/gpuhc/systemd/
echo "install.sh: /usr/local/bin/gpuhc -> $prefix/bin/gpuhc; shims in /usr/local/share/gpuhc/slurm;"
echo "  config /etc/gpuhc/gpuhc.yaml; systemd units in /usr/local/share/gpuhc/systemd (README: slurm.conf, systemd, cron)"
if [ -d "$(dirname "$textfile_dir")" ] && [ "$(stat -c %u "$(dirname "$textfile_dir")")" != 0 ]; then
    # Debian's prometheus-node-exporter makes /var/lib/prometheus the prometheus user's: as
    # root gpuhc writes no file under a directory someone else can rename (docs/ARCHITECTURE.md).
    echo "install.sh: $(dirname "$textfile_dir") is not root's: gpuhc will not write metrics under it;" \
         "dpkg-statoverride --update --add root root 0755 $(dirname "$textfile_dir") (or --textfile-dir DIR)" >&2
fi
[ -n "$admin" ] || exit 0

# ------------------------------------------------------------------ admin host: the sweep
# The sweep runs as the system user gpuhc (Slurm operator rights come from sacctmgr, README),
# which owns only its state directory and its log; the node checks' files stay root's.
if ! getent passwd gpuhc >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/gpuhc/sweep --no-create-home --shell /usr/sbin/nologin gpuhc
fi
install -d -m 0755 -o gpuhc -g gpuhc /var/lib/gpuhc/sweep
install -d -m 0755 "$logdir"
[ -e "$logdir/sweep.log" ] || install -m 0640 -o gpuhc -g gpuhc /dev/null "$logdir/sweep.log"
if [ -d /run/systemd/system ]; then
    layout "$here/examples/systemd/gpuhc-sweep.service" > /etc/systemd/system/gpuhc-sweep.service
    install -m 0644 "$here/examples/systemd/gpuhc-sweep.timer" /etc/systemd/system/
    systemctl daemon-reload
    # Not enabled here: before sweep.results_dir, sweep.partitions and the operator rights are
    # set, every run would fail or probe the wrong nodes (README, "systemd timer or cron").
    if systemctl is-enabled --quiet gpuhc-sweep.timer 2>/dev/null; then
        echo "install.sh: gpuhc-sweep.timer updated (enabled; every 30 minutes, as user gpuhc)"
    else
        echo "install.sh: gpuhc-sweep.timer installed, not enabled: set sweep.results_dir and sweep.partitions," \
             "give gpuhc operator rights, check with gpuhc doctor --admin-host, then systemctl enable --now gpuhc-sweep.timer"
    fi
else
    layout "$here/examples/sweep/cron" > /etc/cron.d/gpuhc-sweep
    install -m 0644 "$here/examples/tmpfiles.d/gpuhc-sweep.conf" /etc/tmpfiles.d/
    systemd-tmpfiles --create /etc/tmpfiles.d/gpuhc-sweep.conf 2>/dev/null || install -d -m 0755 -o gpuhc -g gpuhc /run/gpuhc
    if command -v cron >/dev/null 2>&1 || command -v crond >/dev/null 2>&1; then
        echo "install.sh: /etc/cron.d/gpuhc-sweep installed (every 30 minutes, as user gpuhc)"
    else
        echo "install.sh: /etc/cron.d/gpuhc-sweep installed, but this host has no cron daemon: nothing runs it" \
             "until one does (apt-get install cron; dnf install cronie)" >&2
    fi
    echo "install.sh: until sweep.results_dir and sweep.partitions are set, each run says what is missing" \
         "(check with gpuhc doctor --admin-host)"
fi
echo "install.sh: give gpuhc Slurm operator rights: sacctmgr modify user gpuhc set adminlevel=operator"
