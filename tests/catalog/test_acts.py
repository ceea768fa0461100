"""What an install does by itself (gpuhc/catalog/acts.py, `gpuhc config acts`; issue 50, point 1): the
README's table is what the command prints for the shipped config, and each act follows the
setting the table names."""

from __future__ import annotations

import re

from gpuhc.catalog.acts import acts, recommended, this_config
from gpuhc.config.load import load_config
from gpuhc.model.result import Action
from tests.helpers.cli import gpuhc
from tests.helpers.paths import REPO

SHIPPED = str(REPO / "etc" / "gpuhc.yaml")


def test_the_readmes_table_is_the_commands_output_for_the_shipped_config():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"<!-- generated: gpuhc config acts --markdown --config etc/gpuhc.yaml .*?-->\n(.*?)"
                      r"<!-- end of generated table -->", readme, re.S)
    cp = gpuhc("config", "acts", "--markdown", "--config", SHIPPED)
    assert cp.returncode == 0 and block is not None, cp.stderr
    assert block.group(1) == cp.stdout, "README.md's table differs from `gpuhc config acts --markdown`: regenerate it"


def _config(tmp_path, text: str):
    path = tmp_path / "gpuhc.yaml"
    path.write_text(text)
    return load_config(str(path), "n1")


def _on(config) -> dict[str, bool]:
    return {a.name: a.on for a in acts(config)}


def test_each_act_follows_its_setting(tmp_path):
    shipped = _on(load_config(SHIPPED, "n1"))
    assert shipped["drain"] and shipped["retire (lemon)"] and not shipped["reboot"] and not shipped["GPU reset"]
    observe = _on(_config(tmp_path, "slurm:\n  mode: observe\n"))
    assert not any(observe[name] for name in ("drain", "resume", "retire (quarantine)", "retire (lemon)",
                                              "write into running jobs"))
    ladder = _on(_config(tmp_path, "slurm:\n  remediation:\n    enabled: true\n  lemon:\n    enabled: false\n"
                                   "checks:\n  jobs:\n    thresholds:\n      requeue_after_s: 600\n"))
    assert ladder["reboot"] and ladder["GPU reset"] and ladder["requeue a hung job"] and not ladder["retire (lemon)"]
    quiet = _on(_config(tmp_path, "active:\n  enabled: false\nslurm:\n  retire_bundle:\n    enabled: false\n"))
    assert not quiet["active checks after every job"] and not quiet["retire bundle"]


def test_recommended_beside_what_this_config_does(tmp_path):
    shipped = load_config(SHIPPED, "n1")
    assert recommended(Action.DRAIN_REBOOT, shipped) == "recommended: drain + reboot; this config: drain (remediation off)"
    assert recommended(Action.RESET_GPU, shipped) == "recommended: reset GPU; this config: drain (remediation off)"
    assert recommended(Action.DRAIN_TICKET, shipped) == "drain + hardware ticket"
    on = _config(tmp_path, "slurm:\n  remediation:\n    enabled: true\n")
    assert this_config(Action.DRAIN_REBOOT, on) is None and recommended(Action.DRAIN_REBOOT, on) == "drain + reboot"
    observe = _config(tmp_path, "slurm:\n  mode: observe\n")
    assert this_config(Action.DRAIN_TICKET, observe) == "nothing sent (observe mode: logged as would-do)"
