"""The firmware check: the GPUs' VBIOS alike per model or as the site says, the HCAs' firmware
alike per device family; WARN by default, FAIL (drain + ticket) where the config says fail.

The versions are real ones: VBIOS 96.00.74.00.01 and 96.00.74.00.0D are what `nvidia-smi -q`
printed on two 8x H100 nodes (leptonai/gpud's nvidia-query test data), the HCA firmware the
H100 listing of tests/fixtures/sysfs_ipoib/gpud_fw_ver_h100.txt."""

from __future__ import annotations

from gpuhc.checks.firmware import CHECKS, ID, _validate
from gpuhc.model.host import IbPort
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import healthy_node, no_nvml, results_of, with_gpu
from tests.helpers.paths import REPO

(CHECK,) = CHECKS
OLD, NEW = "96.00.74.00.01", "96.00.74.00.0D"


def _node(vbios=OLD, **gpu):
    s = healthy_node(vbios=vbios)
    for i, v in gpu.items():
        s = with_gpu(s, int(i[3:]), vbios=v)
    return s


def _hcas(listing=None):
    rows = (listing or (REPO / "tests/fixtures/sysfs_ipoib/gpud_fw_ver_h100.txt").read_text()).splitlines()
    out = []
    for line in rows:
        path, fw = line.split(":", 1)
        out.append(IbPort(device=path.split("/")[4], port=1, state="ACTIVE", phys_state="LinkUp", rate_gbps=400.0,
                          fw_ver=fw))
    return out


def _judge(snapshot, **thresholds):
    return results_of(CHECK, snapshot, **thresholds)


def test_a_node_alike_passes_with_what_it_runs():
    s = _node()
    s.ib_ports = _hcas()
    (r,) = _judge(s)
    assert r.status is Status.PASS
    assert r.message == "VBIOS 96.00.74.00.01 on 8 GPUs; HCA firmware 28.41.1000 on 8 HCAs, 32.38.3056 on 1 HCA"


def test_one_gpu_on_another_vbios_warns_naming_each_group():
    (r,) = _judge(_node(gpu7=NEW))
    assert r.status is Status.WARN and r.action is Action.NONE
    assert r.message == ("VBIOS differs across the 8 NVIDIA H100 80GB HBM3 GPUs: 96.00.74.00.01 on "
                         "gpu0,gpu1,gpu2,gpu3,gpu4,gpu5,gpu6; 96.00.74.00.0D on gpu7")


def test_the_site_says_fail_and_it_drains_for_a_ticket():
    (r,) = _judge(_node(gpu7=NEW), vbios="fail")
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET


def test_against_the_site_s_version_each_gpu_off_it_is_named_once():
    out = _judge(_node(gpu2=NEW, gpu5=NEW), vbios_expected=NEW.lower())
    assert [(r.subject, r.status) for r in out] == [(f"gpu{i}", Status.WARN) for i in (0, 1, 3, 4, 6, 7)]
    assert out[0].message == "gpu0 VBIOS 96.00.74.00.01, not the site's (96.00.74.00.0D)"
    (ok,) = _judge(_node(gpu2=NEW), vbios_expected=[OLD, NEW])
    assert ok.status is Status.PASS


def test_two_gpu_models_are_compared_model_by_model():
    s = with_gpu(_node(), 7, name="NVIDIA H200", vbios="96.00.A5.00.1A")
    (r,) = _judge(s)
    assert r.status is Status.PASS


def test_hca_firmware_differs_within_a_family_warns_not_across_families():
    listing = (REPO / "tests/fixtures/sysfs_ipoib/gpud_fw_ver_h100.txt").read_text().replace(
        "mlx5_9/fw_ver:28.41.1000", "mlx5_9/fw_ver:28.39.1002")
    s = _node()
    s.ib_ports = _hcas(listing)
    (r,) = _judge(s)
    assert r.status is Status.WARN
    assert r.message == ("HCA firmware differs across the 8 HCAs of family 28: 28.41.1000 on "
                         "mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8; 28.39.1002 on mlx5_9")
    (r,) = _judge(s, hca_firmware="fail")
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET


def test_no_nvml_says_so_and_still_judges_the_hcas():
    s = no_nvml()
    s.ib_ports = _hcas()
    out = _judge(s)
    assert [r.status for r in out] == [Status.NA, Status.PASS]


def test_settings_are_words_and_versions():
    assert _validate({"vbios": "warn", "hca_firmware": "fail", "vbios_expected": ["96.00.74.00.01"]}) == []
    assert _validate({"vbios": "drain", "hca_firmware": "warn", "vbios_expected": 96}) == [
        "vbios: must be one of warn, fail, got 'drain'",
        "vbios_expected: must be a version or a list of versions, got 96"]
    assert CHECK.id == ID and CHECK.stages == ("passive", "bootstrap")
