"""The fabric half of the live NVML read (gpuhc/sources/nvml_fabric.py), through the fake pynvml:
the newest fabric-info struct the driver knows, NOT_SUPPORTED as nothing, and the C2C fields."""

from __future__ import annotations

import pynvml as real

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.sources.nvml import NvmlLive

COMPLETED = real.NVML_GPU_FABRIC_STATE_COMPLETED
# The cluster of gpud's GB200 recording (leptonai/gpud PR 1106), as its 16 bytes.
CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
ROUTE_UNHEALTHY = real.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE << real.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY


def gb200(**kw) -> FakeGpu:
    info = {"cliqueId": 4026, "clusterUuid": bytes.fromhex(CLUSTER.replace("-", "")), "healthMask": ROUTE_UNHEALTHY,
            "healthSummary": real.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY}
    return FakeGpu(**{"name": "NVIDIA GB200", "fabric": (COMPLETED, real.NVML_SUCCESS), "fabric_info": info, **kw})


def read(nv: FakeNvml):
    r = NvmlLive(module=nv, clock_samples=1).read()
    return r.gpus[0], r.notes


def test_v3_driver_gives_mask_summary_clique_and_cluster():
    g, notes = read(FakeNvml([gb200()]))
    assert (g.fabric_state, g.fabric_status) == ("completed", "success")
    assert (g.fabric_clique_id, g.fabric_cluster_uuid) == (4026, CLUSTER)
    assert g.fabric_health_mask == ROUTE_UNHEALTHY and g.fabric_health_summary == "unhealthy"
    assert notes == []


def test_v2_driver_has_no_summary_and_the_reader_steps_down_quietly():
    g, notes = read(FakeNvml([gb200(fabric_struct_max=2)]))
    assert g.fabric_health_mask == ROUTE_UNHEALTHY and g.fabric_health_summary is None
    assert notes == []


def test_driver_with_only_the_unversioned_call_gives_state_and_clique():
    nv = FakeNvml([gb200(fabric_struct_max=1)])
    g, notes = read(nv)
    assert (g.fabric_state, g.fabric_clique_id, g.fabric_cluster_uuid) == ("completed", 4026, CLUSTER)
    assert g.fabric_health_mask is None and notes == []
    assert nv.calls["nvmlDeviceGetGpuFabricInfo"] == 1


def test_not_supported_is_nothing_never_a_note():
    """An H100 without NVSwitch, a PCIe card: NVML answers NOT_SUPPORTED."""
    g, notes = read(FakeNvml([FakeGpu(fabric=None)]))
    assert (g.fabric_state, g.fabric_status, g.fabric_health_mask, g.fabric_clique_id) == (None, None, None, None)
    assert notes == []


def test_state_not_supported_leaves_the_rest_empty():
    g, _ = read(FakeNvml([gb200(fabric=(real.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, real.NVML_SUCCESS))]))
    assert g.fabric_state == "not supported" and g.fabric_health_mask is None and g.fabric_clique_id is None


def test_zero_cluster_uuid_reads_as_none():
    """Azure/azhpc-images PR 506: "Insufficient Resources", CliqueId 0, ClusterUUID all zeros."""
    gpu = gb200(fabric=(COMPLETED, real.NVML_ERROR_INSUFFICIENT_RESOURCES))
    gpu.fabric_info.update(cliqueId=0, clusterUuid=bytes(16))
    g, _ = read(FakeNvml([gpu]))
    assert (g.fabric_status, g.fabric_clique_id, g.fabric_cluster_uuid) == ("insufficient resources", 0, None)


def test_other_fabric_errors_become_a_note():
    g, notes = read(FakeNvml([gb200(fail={"nvmlDeviceGetGpuFabricInfoV": real.NVML_ERROR_UNKNOWN})]))
    assert g.fabric_state is None and any("fabric info" in n for n in notes)


def test_c2c_counters_come_from_the_device_batch():
    fields = {**FakeGpu().fields, "NVML_FI_DEV_C2C_LINK_ERROR_INTR": 7, "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY": 3,
              "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B": 0}
    nv = FakeNvml([gb200(fields=fields)])
    g, _ = read(nv)
    assert g.c2c_errors == {"crc": 7, "replay": 3, "replay_b2b": 0}
    # in the one device batch, not a call of their own
    assert nv.calls["nvmlDeviceGetFieldValues"] == 2 and len(nv.asked_links("NVML_FI_DEV_C2C_LINK_ERROR_INTR")) == 1


def test_no_c2c_is_none():
    g, _ = read(FakeNvml([FakeGpu()]))
    assert g.c2c_errors is None
