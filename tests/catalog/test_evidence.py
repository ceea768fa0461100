"""The table of evidence to act (gpuhc/catalog/evidence.py): declared once, the same in docs/checks.md,
every check and every class accounted for, and the config's evidence section from it (issue 43)."""

from __future__ import annotations

import re

from gpuhc.checks import all_checks
from gpuhc.config.load import Config, defaults, schema
from gpuhc.catalog.evidence import GPU, HOLDS, TABLE, by_id, class_of, counts_toward_lemon, holds_from, markdown
from gpuhc.model.result import Action
from tests.helpers.paths import REPO

DOC = REPO / "docs" / "checks.md"


def test_the_doc_carries_the_table_as_declared():
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- evidence table: generated from gpuhc/catalog/evidence.py -->\n(.*?)<!-- end of evidence table -->",
                  text, re.DOTALL)
    assert m, "docs/checks.md has no evidence table between its markers"
    assert m.group(1) == markdown(), "regenerate the table in docs/checks.md from gpuhc.catalog.evidence.markdown()"


def test_every_check_has_its_class_and_ids_are_unique():
    assert len({e.id for e in TABLE}) == len(TABLE)
    named = {c for e in TABLE for c in e.checks}
    assert len(named) == sum(len(e.checks) for e in TABLE), "a check named by two classes"
    passive = {c.id for c in all_checks() if not hasattr(c, "tasks")}
    # every passive check is named; the active checks judge the GPUs under load
    assert {c for c in passive if class_of(c) is GPU} <= set(GPU.checks)
    assert all(e.hold in HOLDS for e in TABLE if e.hold is not None)


def test_the_hardware_that_counts_toward_a_lemon_and_what_never_does():
    for check in ("xid", "nvswitch", "ecc", "nvlink", "pcie", "pcie-aer", "gpu-count", "machine-check", "burn-in",
                  "storage"):
        assert counts_toward_lemon(check), check
    assert counts_toward_lemon("kernel-health", "panic-hardware")  # a panic the hardware caused
    for check, evidence in (("services", None), ("host", None), ("host", "mount"), ("host", "scratch"),
                            ("pcie-aer", "aer-corrected"), ("machine-check", "mce-corrected"), ("nvml", None),
                            ("occupancy", None), ("jobs", None), ("state", None), ("storage", "remote-storage"),
                            ("kernel-health", None)):
        assert not counts_toward_lemon(check, evidence), (check, evidence)
    # the node around the GPUs is held before it drains, NVML that stops answering (a long
    # driver call on a healthy GPU looks the same for minutes), a GPU only a little slow (one
    # job's burn-in beside another process looks the same) and a link task that stalls (once can
    # be a hiccup); the rest of the hardware is not
    assert {e.id for e in TABLE if e.hold} == {"service", "mount", "scratch", "aer-corrected", "mce-corrected",
                                               "stuck-process", "remote-storage", "nvml-wedged", "gpu-straggler",
                                               "gpu-link-stall"}
    assert {e.hold for e in TABLE if e.hold and e.kind == "host"} == {"host"}
    assert by_id("nvml-wedged").hold == "driver" and HOLDS["driver"].span_s > HOLDS["host"].span_s


def test_the_config_section_comes_from_the_holds_and_sets_them():
    data = defaults(schema())
    assert data["evidence"] == {n: {"runs": h.runs, "span_s": h.span_s, "gap_s": h.gap_s} for n, h in HOLDS.items()}
    assert holds_from(Config(data).section("evidence")) == HOLDS
    assert holds_from({"host": {"runs": 5, "span_s": 60.0}})["host"].runs == 5


def test_evidence_that_stays_is_in_the_table_and_only_the_nvlink_counts_toward_a_lemon():
    from gpuhc.checks.infiniband import RECURRING_FLAPS_CLASS
    from gpuhc.checks.nvlink import PERSISTENT_CLASS

    nvlink, ib = by_id(PERSISTENT_CLASS), by_id(RECURRING_FLAPS_CLASS)
    assert counts_toward_lemon("nvlink", PERSISTENT_CLASS)  # the GPU board's link: hardware
    assert not counts_toward_lemon("infiniband", RECURRING_FLAPS_CLASS)  # a cable or transceiver, not the node
    for e in (nvlink, ib):  # the check holds it over hours itself, and the reason says how long
        assert e.hold is None and "next job boundary" in e.drain and "how long" in e.drain
    assert "only warn" not in by_id("nvlink").warn and PERSISTENT_CLASS in by_id("nvlink").warn


def test_every_held_class_says_what_it_buys_and_reboots_only_where_that_is_the_cure():
    acts = {e.id: e.act for e in TABLE if e.hold}
    assert acts == {"service": Action.DRAIN_TICKET, "mount": Action.DRAIN_TICKET, "scratch": Action.DRAIN_TICKET,
                    "aer-corrected": Action.DRAIN_TICKET, "mce-corrected": Action.DRAIN_TICKET,
                    "stuck-process": Action.DRAIN_REBOOT, "remote-storage": Action.DRAIN_TICKET,
                    "nvml-wedged": Action.DRAIN_REBOOT, "gpu-straggler": Action.DRAIN_REBOOT,
                    "gpu-link-stall": Action.DRAIN_REBOOT}
    for e in TABLE:  # the columns the doc shows agree with the act the runner applies
        if e.act is not None:
            assert (e.act is Action.DRAIN_REBOOT) == e.reboot.startswith("when held"), e.id
            assert (e.act is Action.DRAIN_TICKET) == e.ticket.startswith("when held"), e.id
