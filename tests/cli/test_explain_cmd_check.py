"""`gpuhc explain check ID`: a check's purpose, stages, sources and default thresholds, from the
registry the runner uses; an unknown id is a usage error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli


@pytest.mark.parametrize("check, words", [
    ("pcie-aer", ["corrected_warn: 10", "stages:     passive, epilog, bootstrap", "reads:      kernel_log, nvml, host"]),
    ("machine-check", ["corrected_warn: 10", "reads:      kernel_log, host"]),
    ("host", ["dstate_fail_s: 600.0", "mount_timeout_s: 5.0"]),
    ("services", ['fabricmanager: "auto"', "probe_timeout_s: 3.0"]),
])
def test_explain_a_host_check(check, words):
    out = CliRunner().invoke(cli, ["explain", "check", check])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"check {check}: ")
    for w in words:
        assert w in out.output


def test_every_check_is_listed_and_an_unknown_one_is_a_usage_error():
    listing = CliRunner().invoke(cli, ["explain", "check"])
    assert listing.exit_code == 0 and "pcie-aer" in listing.output and "services" in listing.output
    bad = CliRunner().invoke(cli, ["explain", "check", "no-such"])
    assert bad.exit_code == 2 and "'no-such' is no check" in bad.output
