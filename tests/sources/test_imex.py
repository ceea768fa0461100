"""The IMEX source (gpuhc/sources/imex.py): real ``nvidia-imex-ctl`` outputs parsed, and the tool
run as root runs anything -- only from a trusted place, with a deadline and a bounded read. The
tool itself is faked at the boundary by a script printing the recorded outputs."""

from __future__ import annotations

import os
import stat
import textwrap
import time

import pytest

from gpuhc.sources import imex
from tests.helpers.paths import FIXTURES

IMEX = os.path.join(FIXTURES, "imex")


def fixture(name: str) -> str:
    with open(os.path.join(IMEX, name), encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------- parsers, real outputs


def test_q_ready():
    assert imex.parse_daemon(fixture("q-ready.txt")) == "READY"


@pytest.mark.parametrize("text", ["", "READY READY", "Connection refused", "ready-ish\n"])
def test_q_anything_else_is_unknown(text):
    assert imex.parse_daemon(text) is None


def test_q_is_case_blind_like_dcgm():
    assert imex.parse_daemon("  waiting_for_peers \n") == "WAITING_FOR_PEERS"


@pytest.mark.parametrize("name,domain,nodes", [
    ("N-one-node-up.txt", "UP", {"10.136.206.48": "READY"}),
    ("N-two-nodes-up.txt", "UP", {"10.136.206.47": "READY", "10.136.206.48": "READY"}),
    ("N-degraded-synthesized.txt", "DEGRADED", {"10.136.206.47": "READY", "10.136.206.48": "UNAVAILABLE"}),
])
def test_N_outputs(name, domain, nodes):
    assert imex.parse_domain(fixture(name)) == (domain, nodes)


def test_N_of_an_18_node_rack_with_versions():
    domain, nodes = imex.parse_domain(fixture("N-18-nodes-up.txt"))
    assert domain == "UP" and len(nodes) == 18 and set(nodes.values()) == {"READY"}
    assert "172.31.56.47" in nodes


def test_N_without_a_domain_line_and_with_lines_outside_the_grammar():
    text = "Node #0 - 10.0.0.1 - READY\nDomain State: SIDEWAYS\nDomain State: UP and more\nrandom\n"
    assert imex.parse_domain(text) == (None, {"10.0.0.1": "READY"})


def test_N_node_table_is_bounded_and_addresses_escaped():
    many = "".join(f"Node #{i} - 10.0.{i // 256}.{i % 256} - READY\n" for i in range(imex.MAX_NODES + 50))
    assert len(imex.parse_domain(many)[1]) == imex.MAX_NODES
    _, nodes = imex.parse_domain("Node #0 - evil\x1b[31m - READY\n")
    assert list(nodes) == ["evil\\x1b[31m"]


# ---------------------------------------------------------------------- the tool, faked


def tool(tmp_path, body: str, mode: int = 0o755) -> str:
    d = tmp_path / "bin"
    d.mkdir(mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    path = d / "nvidia-imex-ctl"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    os.chmod(path, mode)
    return str(path)


def live(path: str, timeout_s: float = 3.0) -> imex.ImexLive:
    return imex.ImexLive(candidates=(path,), timeout_s=timeout_s, owner=os.geteuid())


def answering(tmp_path, q: str, n: str) -> str:
    (tmp_path / "q.txt").write_text(fixture(q) if q.endswith(".txt") else q)
    (tmp_path / "n.txt").write_text(fixture(n))
    return tool(tmp_path, f"""\
        case "$1" in
          -q) cat {tmp_path}/q.txt ;;
          -N) cat {tmp_path}/n.txt ;;
          *) exit 2 ;;
        esac
        """)


def test_ready_daemon_and_its_domain(tmp_path):
    st = live(answering(tmp_path, "q-ready.txt", "N-two-nodes-up.txt")).read()
    assert (st.installed, st.daemon, st.domain, st.error) == (True, "READY", "UP", None)
    assert st.nodes == {"10.136.206.47": "READY", "10.136.206.48": "READY"}


def test_daemon_not_ready_is_not_asked_for_the_domain(tmp_path):
    path = answering(tmp_path, "WAITING_FOR_PEERS\n", "N-two-nodes-up.txt")
    st = live(path).read()
    assert (st.daemon, st.domain, st.nodes) == ("WAITING_FOR_PEERS", None, {})


def test_daemon_down_is_an_error_in_words(tmp_path):
    path = tool(tmp_path, 'echo "Failed to connect to IMEX daemon" >&2\nexit 1\n')
    st = live(path).read()
    assert st.installed and st.daemon is None
    assert st.error.startswith("nvidia-imex-ctl -q: exit 1") and "Failed to connect" in st.error


def test_unknown_answer_is_quoted_not_guessed(tmp_path):
    st = live(answering(tmp_path, "MAYBE\n", "N-one-node-up.txt")).read()
    assert st.daemon is None and "'MAYBE'" in st.error


def test_a_hung_tool_is_killed_at_its_deadline(tmp_path):
    path = tool(tmp_path, "sleep 30\n")
    t0 = time.monotonic()
    st = live(path, timeout_s=0.5).read()
    assert time.monotonic() - t0 < 5
    assert st.daemon is None and st.error == "nvidia-imex-ctl -q: no answer within 0.5s"


def test_endless_output_is_cut_at_the_bound(tmp_path):
    path = tool(tmp_path, 'if [ "$1" = -q ]; then echo READY; else yes "Node #0 - 10.0.0.1 - READY"; fi\n')
    t0 = time.monotonic()
    st = live(path, timeout_s=5).read()
    assert time.monotonic() - t0 < 5
    assert st.daemon == "READY" and st.domain is None and st.nodes == {}
    assert st.error == "nvidia-imex-ctl -N: more than 256 KiB of output"


def test_not_installed(tmp_path):
    st = live(str(tmp_path / "nowhere" / "nvidia-imex-ctl")).read()
    assert st.installed is False and st.daemon is None and st.error is None


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_tool_others_can_write_is_never_run(tmp_path, mode):
    path = answering(tmp_path, "q-ready.txt", "N-one-node-up.txt")
    os.chmod(path, mode)
    assert imex.find_ctl((path,), owner=os.geteuid()) is None
    assert live(path).read().installed is False


def test_a_tool_in_a_directory_others_can_write_is_never_run(tmp_path):
    path = answering(tmp_path, "q-ready.txt", "N-one-node-up.txt")
    os.chmod(os.path.dirname(path), 0o777)
    assert imex.find_ctl((path,), owner=os.geteuid()) is None


def test_a_tool_someone_else_owns_is_never_run(tmp_path):
    path = answering(tmp_path, "q-ready.txt", "N-one-node-up.txt")
    assert imex.find_ctl((path,), owner=os.geteuid() + 1) is None
    assert imex.find_ctl((path,), owner=os.geteuid()) == path


def test_a_directory_is_not_a_tool(tmp_path):
    d = tmp_path / "nvidia-imex-ctl"
    d.mkdir(mode=0o755)
    assert imex.find_ctl((str(d),), owner=os.geteuid()) is None
    assert stat.S_ISDIR(os.stat(d).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="the program rule applies as root (CI runs as root)")
def test_a_root_link_into_a_directory_users_can_write_is_refused_and_said(tmp_path):
    """Issue 29: the swap race. A root-owned link at a search path, to a root-owned file in a
    directory users can write: a user could exchange the file (renameat2 RENAME_EXCHANGE) between
    the check and the exec. The file's whole directory chain must be root's: refused, said, never run."""
    ran = tmp_path / "ran"
    drop = tmp_path / "drop"
    drop.mkdir()
    os.chmod(drop, 0o777)
    target = drop / "nvidia-imex-ctl"
    target.write_text(f"#!/bin/sh\ntouch {ran}\necho READY\n")
    os.chmod(target, 0o755)
    sysdir = tmp_path / "usr-bin"
    sysdir.mkdir(mode=0o755)
    link = sysdir / "nvidia-imex-ctl"
    link.symlink_to(target)
    st = imex.ImexLive(candidates=(str(link),)).read()
    assert st.installed is False and "writable by group or others" in (st.error or "") and not ran.exists()
    from gpuhc.checks import fabric
    from gpuhc.checks.base import Context
    from gpuhc.model.result import Status
    from gpuhc.model.snapshot import Snapshot

    out = fabric.judge_imex(Snapshot("n1", 1.0, imex=st), Context(thresholds={"imex_required": False}))
    assert [(r.status, r.message.split(":")[0]) for r in out.results] == [(Status.WARN, "IMEX tool not run")]


@pytest.mark.skipif(os.geteuid() != 0, reason="the program rule applies as root (CI runs as root)")
def test_the_real_path_is_run_resolved_once(tmp_path, monkeypatch):
    real = answering(tmp_path, "q-ready.txt", "N-one-node-up.txt")
    sysdir = tmp_path / "sbin"
    sysdir.mkdir(mode=0o755)
    link = sysdir / "nvidia-imex-ctl"
    link.symlink_to(real)
    argvs = []
    monkeypatch.setattr(imex, "_run", lambda argv, t: (argvs.append(argv), ("READY\n", None))[1])
    imex.ImexLive(candidates=(str(link),)).read()
    assert argvs and all(a[0] == real for a in argvs)  # the file, not the link a later swap could repoint
