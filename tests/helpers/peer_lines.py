"""Peers' kernel-log test lines (tests/fixtures/kernel_log/peers/, cited in its README), parsed
and judged by a check on the 8x H100 node of tests/helpers/snapshots.py."""

from __future__ import annotations

from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import context, healthy_node


def lines(name: str) -> list[str]:
    return (FIXTURES / "kernel_log" / "peers" / name).read_text().splitlines()


def judge(check, text: list[str]):
    snap = healthy_node()
    snap.kernel = parse_lines(text)
    snap.kernel.boot_id = "boot-a"
    return check.judge(snap, context(check))


def brief(out) -> list[tuple]:
    return [(r.status, r.action, r.subject) for r in out.results]
