"""The site's other health check chained after gpuhc's (gpuhc/slurm/chain.py; docs/slurm.md, "Sharing
the slot with NHC"). The chained programs are real scripts, run as the health check runs them;
Slurm is MiniSlurm here (tests/slurm_real/test_chain.py has the real one)."""

from __future__ import annotations

import os
import time

import pytest

from tests.helpers.hooks import _events, recorder  # noqa: F401 - the recording hook fixture
from tests.helpers.minislurm import OK, OUR_REASON, XID, MiniSlurm, config, flow

from gpuhc.slurm import chain
from gpuhc.slurm.flows import entry
from gpuhc.slurm.flows.frame import run


def _script(path, body: str, shell: str = "/bin/sh") -> str:
    path.write_text(f"#!{shell}\n" + body)
    path.chmod(0o755)
    return str(path)


def _flow(tmp_path, monkeypatch, results, argv, slurm=None, env=None, **slurm_keys):
    cfg = config(tmp_path, chain=list(argv), **slurm_keys)
    slurm = slurm or MiniSlurm({"n1": ("IDLE", None)})
    _, f = flow(tmp_path, monkeypatch, "passive", slurm, results, cfg=cfg, env=env)
    return f, slurm


def test_the_chained_program_runs_after_gpuhc_has_acted_and_its_failure_is_the_status(tmp_path, monkeypatch):
    """A healthy gpuhc and a failing NHC: the health check exits 1 and the log says why; the
    program ran with the node's name and the loop guard set."""
    seen = tmp_path / "seen"
    prog = _script(tmp_path / "nhc", f'echo "NHC: check_fs_mount: /scratch not mounted ($SLURMD_NODENAME $GPUHC_CHAINED)"\n'
                                     f'echo ran >> {seen}\nexit 1\n')
    f, slurm = _flow(tmp_path, monkeypatch, [OK], [prog], env={"SLURMD_NODENAME": "n1"})
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 1 and out.exit_code == 0  # gpuhc's own status stays 0 in its record; the health check's is 1
    assert seen.read_text() == "ran\n"
    assert out.extra["chain"]["status"] == 1 and out.extra["chain"]["why"] == "exited 1"
    line = next(x for x in f.log.lines if "chained" in x)
    assert "exited 1 (status 1): NHC: check_fs_mount: /scratch not mounted (n1 1)" in line
    assert slurm.nodes["n1"] == ["IDLE", None]  # gpuhc itself asked Slurm nothing


def test_gpuhc_fails_and_drains_first_then_the_program_runs_and_gpuhc_s_status_wins(tmp_path, monkeypatch,
                                                                                   recorder):  # noqa: F811
    hook, got = recorder
    order = tmp_path / "order"
    prog = _script(tmp_path / "nhc", f'n=$(wc -l < {got} 2>/dev/null || echo 0); echo "hook events before me: $n" > {order}\n'
                                     "exit 0\n")
    f, slurm = _flow(tmp_path, monkeypatch, [XID], [prog])
    f.opts.config.data["hooks"] = {"commands": [[hook]], "events": ["drain"], "timeout_s": 5.0}
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 1 and slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert [e["event"] for e in _events(got)] == ["drain"]
    assert order.read_text().split() == ["hook", "events", "before", "me:", "1"]
    assert out.extra["chain"]["status"] == 0


@pytest.mark.parametrize("results, own", [([OK], 0), ([XID], 1)])
def test_a_slow_program_is_cut_at_the_deadline_with_its_group_and_gpuhc_s_verdict_stands(tmp_path, monkeypatch,
                                                                                        results, own):
    """The program and a watchdog it starts in a group of its own (as NHC's is, with set -m) are
    both gone when the health check ends, inside its deadline; the program's SIGTERM handler ran
    (NHC marks the node itself then); gpuhc's drain and status are kept."""
    pids = tmp_path / "pids"
    prog = _script(tmp_path / "slow", f"""set -m
sleep 300 &
echo "$! $(cut -d' ' -f5 /proc/$!/stat) $$" > {pids}
set +m
trap 'echo terminated by SIGTERM; exit 143' TERM
echo started
while :; do sleep 0.1; done
""", shell="/bin/bash")  # NHC is a bash program
    f, slurm = _flow(tmp_path, monkeypatch, results, [prog], deadline_s={"passive": 4.0})
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert not f.deadline.passed()  # inside the health check's deadline (slurmd's 60 s)
    assert code == (own or 3)  # no verdict from the program: "could not judge"
    assert out.exit_code == own
    assert out.extra["chain"]["status"] == chain.STATUS_CUT
    assert out.extra["chain"]["why"].startswith("cut at the deadline")
    tail = out.extra["chain"]["tail"]
    assert tail.startswith("started") and tail.endswith("terminated by SIGTERM"), tail
    watchdog, group, leader = map(int, pids.read_text().split())
    assert group == watchdog != leader  # a process group of its own, as NHC's watchdog
    assert not _alive(watchdog), "the program's other process group outlived the health check"
    if own:
        assert slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_missing_program_is_127_and_gpuhc_still_drains(tmp_path, monkeypatch):
    f, slurm = _flow(tmp_path, monkeypatch, [XID], [str(tmp_path / "no-such-nhc")])
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 1 and slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert out.extra["chain"]["status"] == chain.STATUS_MISSING
    f, _ = _flow(tmp_path, monkeypatch, [OK], [str(tmp_path / "no-such-nhc")])
    assert run(f, entry.healthcheck, fail_open=False)[1] == 3


@pytest.mark.skipif(os.geteuid() != 0, reason="the trust rule applies to root only; CI runs as root")
def test_as_root_a_program_others_can_write_is_refused_not_run(tmp_path, monkeypatch):
    ran = tmp_path / "ran"
    prog = _script(tmp_path / "nhc", f"touch {ran}\n")
    os.chmod(prog, 0o777)
    f, _ = _flow(tmp_path, monkeypatch, [OK], [prog])
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 3 and out.extra["chain"]["status"] == chain.STATUS_REFUSED and not ran.exists()
    assert "writable by group or others" in out.extra["chain"]["why"]


def test_a_relative_path_is_a_config_error_said_and_gpuhc_s_failure_kept(tmp_path, monkeypatch):
    f, slurm = _flow(tmp_path, monkeypatch, [XID], ["nhc"])
    _, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 1 and slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert any("slurm.chain: 'nhc' is not an absolute path" in x for x in f.log.lines)
    f, _ = _flow(tmp_path, monkeypatch, [OK], ["nhc"])
    assert run(f, entry.healthcheck, fail_open=False)[1] == 2


def test_a_health_check_started_by_a_chain_does_not_chain_again(tmp_path, monkeypatch):
    ran = tmp_path / "ran"
    prog = _script(tmp_path / "nhc", f"touch {ran}\nexit 1\n")
    f, _ = _flow(tmp_path, monkeypatch, [OK], [prog], env={chain.CHAIN_ENV: "1"})
    _, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 0 and not ran.exists()
    assert any("started by a chain" in x for x in f.log.lines)


def test_a_crashed_gpuhc_still_runs_the_chain_and_keeps_its_own_status(tmp_path, monkeypatch):
    """gpuhc broke (its checks could not run; or the flow itself raised): the site's other
    health check runs all the same, and the health check's status is gpuhc's (3)."""
    ran = tmp_path / "ran"
    prog = _script(tmp_path / "nhc", f"echo x >> {ran}\n")
    cfg = config(tmp_path, chain=[prog])
    _, f = flow(tmp_path, monkeypatch, "passive", MiniSlurm({"n1": ("IDLE", None)}), [OK], cfg=cfg,
                raises=RuntimeError("boom"))
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert out.report is None and code == 3 and ran.read_text() == "x\n"

    def broken(fl):
        raise RuntimeError("a bug in the flow")

    out, code = run(f, broken, fail_open=False)
    assert out is None and code == 3 and ran.read_text() == "x\nx\n"


def test_the_output_kept_is_a_bounded_escaped_tail(tmp_path, monkeypatch):
    prog = _script(tmp_path / "loud", "head -c 1048576 /dev/zero | tr '\\0' x\nprintf 'end \\033]0;owned\\007 line\\n'\n")
    f, _ = _flow(tmp_path, monkeypatch, [OK], [prog])
    out, code = run(f, entry.healthcheck, fail_open=False)
    tail = out.extra["chain"]["tail"]
    assert code == 0 and len(tail) <= chain.OUTPUT_TAIL + 20 and tail.endswith("end \\x1b]0;owned\\x07 line")
    assert "\x1b" not in "".join(f.log.lines)


def test_the_status_is_gpuhc_s_own_when_not_0_else_the_program_s_verdict_in_gpuhc_s_codes():
    """Always 0-4: the shims read any other status as gpuhc dying (slurm/shim.sh)."""
    failed = chain.ChainResult(("/x",), 7, "exited 7", exited=True)
    assert [chain.combine(own, failed) for own in (0, 1, 2, 3, 4)] == [1, 1, 2, 3, 4]
    assert chain.combine(0, chain.ChainResult(("/x",), 0, "exited 0", exited=True)) == 0
    assert chain.combine(0, None) == 0
    for no_verdict in (chain.STATUS_CUT, chain.STATUS_REFUSED, chain.STATUS_MISSING, 128 + 9):
        assert chain.combine(0, chain.ChainResult(("/x",), no_verdict, "not to its end")) == 3
    assert chain.combine(0, chain.ChainResult((), 2, "slurm.chain: not an argv")) == 2
