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
#   --enforce        a fresh config goes live in enforce mode (gpuhc drains and resumes nodes);
#                    without it, observe mode (decide and log only). An existing config is kept.
#   --rollback       point the target (the node install's --prefix, or --venv DIR) back at the
#                    release before the current one, kept by the last install; nothing is built
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
rollback=
enforce=
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
        --rollback) rollback=1; shift ;;
        --enforce) enforce=1; shift ;;
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
has_pip() { "$1" -m pip --version >/dev/null 2>&1; }
make_venv() {
    if "$python" -c 'import ensurepip' >/dev/null 2>&1 && "$python" -m venv "$1"; then
        pip="$1/bin/python -m pip"
    elif has_pip "$python" && rm -rf "$1" && "$python" -m venv --without-pip "$1"; then
        pip="$python -m pip --python $1/bin/python"
    else
        die "cannot make a virtual environment with pip in $1: $python has neither ensurepip nor pip" \
            "(Debian, Ubuntu: apt-get install python3-venv; RHEL: dnf install python3.11-pip)"
    fi
}

# Upgrades without a gap (README, "Upgrade"). The target (/opt/gpuhc, or --venv DIR) is a link
# to one release, a whole venv in TARGET.releases/<time>. A run builds the new release beside the
# one in use, checks that it runs, and only then points the link at it with one rename(2): a
# health check or prolog that starts during the install runs the old release or the new one,
# never a half-built one. A run that fails removes what it built and leaves the link alone. The
# release before stays, for `install.sh --rollback`; older ones go. A target that is still a
# venv of its own (an install before this layout) moves into TARGET.releases at the switch.
target=${venv:-$prefix}
# Absolute: the link's target is read relative to the link's own directory.
mkdir -p "$(dirname "$target")"
target=$(cd "$(dirname "$target")" && pwd)/$(basename "$target")
releases=$target.releases
marker=.gpuhc-install-incomplete  # in a release being built: never the one a rollback picks
release=
current_release() {  # the release the link points at, or nothing
    [ -L "$target" ] && readlink "$target"
}
check_target() {
    if [ -L "$target" ]; then
        case $(readlink "$target") in "$releases"/*) return ;; esac
        die "$target is a link, not to a release in $releases: move it away or choose another directory"
    fi
    [ -e "$target" ] || return 0
    [ -e "$target/pyvenv.cfg" ] && return 0
    [ -d "$target" ] && [ -z "$(ls -A "$target")" ] ||
        die "$target exists and is not a virtual environment: move it away or choose another directory"
}
switch_to() {  # point the target at release $1 with one rename
    link=$target.switch.$$
    ln -sfn "$1" "$link"
    if [ -d "$target" ] && [ ! -L "$target" ]; then
        if [ -e "$target/pyvenv.cfg" ] && ! "$target/bin/gpuhc" --version >/dev/null 2>&1; then
            # A venv whose gpuhc does not run (an install stopped half-way, a venv without pip
            # an older install.sh left) is no release to roll back to.
            echo "install.sh: $target was a broken virtual environment (its gpuhc does not run): replaced," \
                 "not kept to roll back to" >&2
            rm -rf "$target"
        elif [ -e "$target/pyvenv.cfg" ]; then
            # The layout before releases: its venv becomes the release to roll back to (its
            # scripts name $target/bin/python, which the link keeps valid).
            rm -rf "$releases/0-before-releases"
            mv "$target" "$releases/0-before-releases"
        else
            rmdir "$target"
        fi
    fi
    mv -T "$link" "$target"
}
# Files a running hook may read are replaced whole, by rename: never seen missing or half-written.
put() {  # MODE DEST (the new content on stdin)
    cat > "$(dirname "$2")/.$(basename "$2").new.$$"
    chmod "$1" "$(dirname "$2")/.$(basename "$2").new.$$"
    mv -f "$(dirname "$2")/.$(basename "$2").new.$$" "$2"
}
# The manual page (gpuhc/cli/manpage.py: man gpuhc) and bash's completion (click's own), written
# from the help of the release the node install's target points at: at an install, and again at
# a rollback, so that both describe the commands that run. The shims and the rest stay as the
# newest install wrote them: a shim runs `gpuhc HOOK` through /usr/local/bin/gpuhc (the target's,
# whichever release it is) and reads only its exit status, the same in every release.
release_docs() {
    install -d -m 0755 /usr/local/share/man/man1 /usr/share/bash-completion/completions
    if page=$("$target/bin/python" -m gpuhc.cli.manpage 2>/dev/null); then
        printf '%s\n' "$page" | put 0644 /usr/local/share/man/man1/gpuhc.1
    else  # a release from before the man page: none rather than another release's
        rm -f /usr/local/share/man/man1/gpuhc.1
    fi
    _GPUHC_COMPLETE=bash_source "$target/bin/gpuhc" | put 0644 /usr/share/bash-completion/completions/gpuhc
}
rollback() {
    now=$(current_release) || die "$target is not a link to a release: nothing to roll back to"
    prev=
    for r in "$releases"/*; do
        [ -d "$r" ] && [ "$r" != "$now" ] && [ ! -e "$r/$marker" ] && prev=$r
    done
    [ -n "$prev" ] || die "no earlier release in $releases to roll back to"
    switch_to "$prev"
    [ -n "$venv" ] || release_docs
    echo "install.sh: $target -> $prev ($("$target/bin/gpuhc" --version 2>/dev/null)); $now stays for a roll forward"
}

if [ -n "$rollback" ]; then
    [ -z "$venv" ] && [ "$(id -u)" -ne 0 ] && die "a node rollback changes $prefix: run it as root"
    rollback
    exit 0
fi
if [ -n "$download" ]; then
    mkdir -p "$download"
    download=$(cd "$download" && pwd)
    release=$(mktemp -d "${TMPDIR:-/tmp}/gpuhc-download.XXXXXX")/venv
elif [ -z "$venv" ] && [ "$(id -u)" -ne 0 ]; then
    die "a node install writes $prefix, /usr/local and /etc: run it as root (or use --venv DIR)"
else
    check_target
    mkdir -p "$releases"
    release=$releases/$(date -u +%Y%m%dT%H%M%SZ).$$
fi
src_dir=
pip_log=$(mktemp "${TMPDIR:-/tmp}/gpuhc-pip.XXXXXX")
# On any exit: the temporary files go; the release this run built goes too unless it is in use.
finish() {
    rc=$?
    rm -f "$pip_log" "$target.switch.$$"
    [ -z "$src_dir" ] || [ "$src_dir" = "$here" ] || rm -rf "$src_dir"
    if [ -n "$download" ]; then
        rm -rf "$(dirname "$release")"
    elif [ "$rc" -ne 0 ] && [ -n "$release" ] && [ -e "$release" ] && [ "$(current_release)" != "$release" ]; then
        rm -rf "$release"
        echo "install.sh: removed the unfinished release $release; $target is as it was" >&2
    fi
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM HUP
make_venv "$release"
touch "$release/$marker"
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
# The new release must run before anything points at it.
version=$("$release/bin/gpuhc" --version 2>&1) || die "the new release does not run: $version"
rm -f "$release/$marker"
before=$(current_release) || before=
switch_to "$release"
[ -n "$before" ] || before=$releases/0-before-releases  # (the venv this run moved aside, if any)
# Kept: the release in use before this run (for --rollback) and this one; older ones go.
for r in "$releases"/*; do
    case $r in "$release"|"$before") continue ;; esac
    rm -rf "$r"
done
echo "install.sh: gpuhc in $target -> $release (extras: ${extras:-none}; $version)"
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
    layout "$here/slurm/$shim" | put 0755 "/usr/local/share/gpuhc/slurm/$shim"
done
put 0755 /usr/local/share/gpuhc/uninstall.sh < "$here/uninstall.sh"
# The hooks example under the name the config's example and docs/repair.md give it.
put 0755 /usr/local/sbin/gpuhc-slack-webhook < "$here/examples/hooks/slack-webhook.py"
# The scenarios site test mode replays (README, "Try it under Slurm without GPUs").
install -d -m 0755 /usr/local/share/gpuhc/scenarios
for f in "$here"/examples/scenarios/*.yaml; do
    put 0644 "/usr/local/share/gpuhc/scenarios/$(basename "$f")" < "$f"
done
# A fresh install goes live in observe mode (README, "Observe, then enforce"): gpuhc judges, logs and
# records what it would do, and changes nothing in Slurm until the site says enforce (--enforce,
# or the config's slurm.mode line). An upgrade never touches the config, so it keeps its mode.
if [ ! -e /etc/gpuhc/gpuhc.yaml ]; then  # never overwrite an edited config
    mode=observe
    [ -z "$enforce" ] || mode=enforce
    layout "$here/etc/gpuhc.yaml" |
        sed "s|^  # mode: observe .*|  mode: $mode             # observe: decide and log, change nothing in Slurm (README, \"Observe, then enforce\"); enforce: act|" |
        put 0644 /etc/gpuhc/gpuhc.yaml
    grep -q "^  mode: $mode " /etc/gpuhc/gpuhc.yaml || die "the shipped config has no slurm.mode line to set"
    echo "install.sh: /etc/gpuhc/gpuhc.yaml: slurm.mode $mode; logs in $logdir, metrics in $textfile_dir"
elif [ -n "$enforce" ]; then
    echo "install.sh: --enforce: /etc/gpuhc/gpuhc.yaml exists and is left as it is (its slurm.mode decides)" >&2
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
release_docs
# The Prometheus rules and the Grafana dashboard on gpuhc's metrics (README, "After the drain").
install -d -m 0755 /usr/local/share/gpuhc/alerting
install -m 0644 "$here/examples/alerting/gpuhc-rules.yml" "$here/examples/alerting/grafana-dashboard.json" \
    /usr/local/share/gpuhc/alerting/
install -d -m 0755 /usr/local/share/gpuhc/systemd
install -m 0644 "$here"/examples/systemd/*.service "$here"/examples/systemd/*.timer /usr/local/share/gpuhc/systemd/
# A running watcher keeps the modules it imported; an upgrade restarts it onto the new release.
if [ -d /run/systemd/system ] && systemctl is-active --quiet gpuhc-watch.service 2>/dev/null; then
    systemctl try-restart gpuhc-watch.service && echo "install.sh: gpuhc-watch.service restarted on the new release"
fi
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
