"""The job's GPUs, as Slurm gave them, on this node's hardware: for the prolog, the epilog and
``gpuhc check --gpus``.

The mapping is gpuhc/node/gpumap.py's; this module feeds it and keeps it:

- Inputs: gres.conf and the MIG minors (gpuhc/sources/gres.py, a replay's own ``gres`` section
  first), and who the GPUs are (their minors, bus ids and MIG devices) from the configured NVML
  source, read once without counters.
- Kept per boot in the state document (``gpumap``): the table of every Slurm device -> GPU (bus
  id, NVML index) and MIG instance, keyed by the boot id, gres.conf's identity and the MIG
  instances that exist (a re-partition needs no reboot), so the prolog's happy path reads NVML
  no more than before. A replay builds it afresh every run.
- When the job's devices cannot be told (an index gres.conf does not have, a gres.conf that
  cannot be read, NVML without minors) the run judges every GPU's hardware and not who holds
  them, says why loudly, and nothing is drained for it: gpuhc not knowing is not the node's
  fault.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Mapping

from gpuhc.node.gpumap import JobScope, Mapped, build, identity, scope, select
from gpuhc.node.gres_conf import GpuMapError
from gpuhc.sources import build_sources
from gpuhc.sources.gres import gres_conf_path, mig_layout, read_inputs, stamp_of

CACHE_KEY = "gpumap"


def node_devices(opts: Any, node: str, env: Mapping[str, str]) -> tuple[list[Mapped], str]:
    """Every Slurm GPU device of the node on the hardware, and what the mapping was read from.
    Raises GpuMapError."""
    played = _scenario_path(opts.sources)
    if played is None:
        return _node_devices(opts, node, env, None)
    # A replay reads its recording for the gres section and again for the GPUs: loaded once.
    from gpuhc.sources.scenario import loaded_once

    with loaded_once():
        return _node_devices(opts, node, env, played)


def _node_devices(opts: Any, node: str, env: Mapping[str, str], played: str | None) -> tuple[list[Mapped], str]:
    spec = opts.sources
    configured = opts.config.section("node").get("gres_conf")
    recorded = _recorded(played)
    replay = recorded is not None
    path = gres_conf_path(configured, env)
    # An MPS job's indices count the mps records' devices (docs/facts.md): only its environment
    # says it is one. A shard job's count the shard records', which name the same files in the
    # same order where a site writes them as Slurm's examples do.
    name = "mps" if env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") else "gpu"
    stamp = None if replay else [_boot_id(), stamp_of(path), name, mig_layout()]
    if stamp is not None:
        cached = _cached(opts.state_dir, stamp)
        if cached is not None:
            return cached
    inputs = read_inputs(node, configured, env, recorded or {})
    nvml = who_the_gpus_are(spec)
    if inputs.conf is None:
        if nvml is None or not nvml.available:
            raise GpuMapError(f"this node shows no GPU: no gres.conf at {path}, and NVML cannot be read "
                              "(no NVIDIA driver loaded?)")
        table, source = identity(nvml), f"no gres.conf at {path}: NVML's numbers"
    else:
        table = build(inputs.conf, nvml, inputs.minors, name)
        auto = " (AutoDetect=nvml)" if inputs.conf.autodetect == "nvml" and name == "gpu" else ""
        source = f"{inputs.where}{auto}" + (" (mps devices)" if name == "mps" else "")
    if stamp is not None:
        _remember(opts.state_dir, stamp, table, source)
    return table, source


def who_the_gpus_are(spec: Any) -> Any:
    """The configured NVML source read for the GPUs' identities only (minor, bus id, MIG
    devices): no GPU is the stage's, so no counter is read."""
    return build_sources(replace(spec, gpus=[], job=None)).nvml.read()


def job_devices(opts: Any, node: str, env: Mapping[str, str]) -> tuple[JobScope | None, str]:
    """The job's devices from the environment; (None, why) when it names none. Raises
    GpuMapError."""
    if not any((env.get(v) or "").strip() for v in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")):
        return select([], env, "")  # no GPU named (a CPU job, a CPU node): nothing to map
    table, source = node_devices(opts, node, env)
    devices, where = select(table, env, source)
    if devices is None:
        return None, where
    return scope(devices), f"{where} -> " + ", ".join(short(m) for m in devices)


def short(m: Mapped) -> str:
    if m.gpu is None:
        return f"{m.index}:no GPU (minor {m.minor})"
    inst = "" if not m.mig else f" gi{m.gi}" + ("" if m.ci is None else f"/ci{m.ci}")
    return f"{m.index}:gpu{m.gpu}{inst}" + (" shared" if m.shared else "")


def _scenario_path(spec: Any) -> str | None:
    """The recording a replay (or the site test mode) plays; None when the node is live."""
    path = spec.nvml_scenario
    if not path and spec.test_scenario:
        from gpuhc.sources import testmode

        path, _ = testmode.resolve(spec.test_scenario)
    return path or None


def _recorded(path: str | None) -> dict[str, str] | None:
    """The ``gres`` section of the recording at ``path`` ({} when it has none); None when the
    node is live (no path)."""
    if path is None:
        return None
    from gpuhc.sources.scenario import load_scenario

    return dict(load_scenario(path, 0).gres or {})


def _boot_id() -> str | None:
    from gpuhc.sources.kernel_log import boot_id

    return boot_id()


def _cached(state_dir: str, stamp: list) -> tuple[list[Mapped], str] | None:
    from gpuhc.state.node import StateError, StateStore

    try:
        entry = StateStore(state_dir).read().get(CACHE_KEY)
        if not isinstance(entry, dict) or entry.get("stamp") != stamp or stamp[0] is None:
            return None
        return [Mapped.from_dict(d) for d in entry["table"]], str(entry["source"])
    except (StateError, KeyError, TypeError, ValueError):
        return None  # unreadable or from another gpuhc: made again


def _remember(state_dir: str, stamp: list, table: list[Mapped], source: str) -> None:
    from gpuhc.state.node import StateError, StateStore

    if stamp[0] is None or not os.path.isdir(state_dir):
        return  # no boot id to key it by, or no state yet: made again next run
    try:
        with StateStore(state_dir).transaction() as doc:
            doc[CACHE_KEY] = {"stamp": stamp, "source": source, "table": [m.to_dict() for m in table]}
    except StateError:
        pass  # the mapping stands for this run; the next one makes it again
