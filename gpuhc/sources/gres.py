"""What Slurm's GPU numbers are read with on this node: gres.conf and the driver's MIG minors.

The mapping itself is pure (gpuhc/node/gpumap.py); this module finds and reads its inputs:

- gres.conf where slurmd reads it: ``node.gres_conf`` when configured, else beside the
  slurm.conf Slurm hands the prolog and epilog (``SLURM_CONF``; slurmd looks for gres.conf in
  slurm.conf's directory, configless mode's cache included), else ``/etc/slurm/gres.conf``.
  As root it must be root's and written by no one else (the config's rule): a gres.conf others
  can write could point gpuhc at any GPU. Read bounded, never through a link to a non-file.
- ``/proc/driver/nvidia-caps/mig-minors`` (the driver's table of MIG capability minors).
- The MIG instances that exist now (``/proc/driver/nvidia/capabilities``), for the cache's key
  only: a re-partition without a reboot changes the mapping.
- A replay takes both from the scenario's ``gres`` section where it has them (a recording is
  not this node), else from the live files (the test cluster's stand-in gres.conf).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from gpuhc.node.gres_conf import GpuMapError, GresConf, parse_gres_conf, parse_mig_minors

DEFAULT_GRES_CONF = "/etc/slurm/gres.conf"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
MIG_CAPS = "/proc/driver/nvidia/capabilities"
MAX_MIG_INSTANCES = 4096  # GPU instances listed in the layout (32 GPUs of 7 is 224)
MAX_GRES_BYTES = 1024 * 1024
MAX_MINORS_BYTES = 1024 * 1024  # 32 GPUs' table is about 100 KB


@dataclass
class GresInputs:
    """gres.conf (None: the node has none) and the MIG minors, with where they came from."""

    conf: GresConf | None
    minors: dict[int, tuple]
    stamp: list | None  # gres.conf's identity (path, inode, size, mtime): the cache's key
    where: str


def gres_conf_path(configured: str | None, env: Mapping[str, str]) -> str:
    if configured:
        return configured
    slurm_conf = env.get("SLURM_CONF")
    if slurm_conf:
        return os.path.join(os.path.dirname(slurm_conf), "gres.conf")
    return DEFAULT_GRES_CONF


def read_inputs(node: str, configured: str | None, env: Mapping[str, str],
                recorded: Mapping[str, str] | None = None, minors_path: str = MIG_MINORS) -> GresInputs:
    """Read gres.conf and the MIG minors (the recorded ones first). Raises GpuMapError."""
    recorded = recorded or {}
    if "conf" in recorded:
        conf = parse_gres_conf(recorded["conf"], "gres.conf (recorded)", node)
        stamp, where = None, "gres.conf (recorded)"
    else:
        path = gres_conf_path(configured, env)
        where = path
        text, stamp = _read(path, MAX_GRES_BYTES, "gres.conf", trusted=True)
        conf = None if text is None else parse_gres_conf(text, path, node)
    if "mig_minors" in recorded:
        minors_text: str | None = recorded["mig_minors"]
    else:
        minors_text, _ = _read(minors_path, MAX_MINORS_BYTES, "mig-minors", trusted=False)
    return GresInputs(conf, parse_mig_minors(minors_text or ""), stamp, where)


def record(configured: str | None, env: Mapping[str, str], minors_of: set[int],
           minors_path: str = MIG_MINORS) -> dict[str, str] | None:
    """The ``gres`` section `gpuhc snapshot` writes, so a recording replays with the node's own
    gres.conf and the MIG minors of its GPUs (``minors_of``); None when there is neither.
    Raises GpuMapError for a gres.conf that may not be trusted."""
    out: dict[str, str] = {}
    text, _ = _read(gres_conf_path(configured, env), MAX_GRES_BYTES, "gres.conf", trusted=True)
    if text is not None:
        out["conf"] = text
    minors, _ = _read(minors_path, MAX_MINORS_BYTES, "mig-minors", trusted=False)
    if minors:
        keep = [line for line in minors.splitlines()
                if not line.startswith("gpu") or line[3:].split("/", 1)[0] in {str(m) for m in minors_of}]
        out["mig_minors"] = "\n".join(keep) + "\n"
    return out or None


def stamp_of(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_ino, st.st_size, st.st_mtime_ns]


def mig_layout(root: str | None = None) -> list[str]:
    """The GPU and compute instances that exist now, ``gpu<minor>/gi<N>:ci<M>,..`` each, as the
    driver lists them for their device files (``<root>/gpu<minor>/mig/gi<N>/ci<M>``, NVIDIA's MIG
    user guide, "Device Nodes and Capabilities"): a few directory reads and no NVML, so the
    prolog's happy path stays as cheap, yet a re-partition without a reboot is seen."""
    root = root or MIG_CAPS
    out: list[str] = []
    try:
        gpus = sorted(n for n in os.listdir(root) if n.startswith("gpu"))
    except OSError:
        return out  # no MIG-capable driver here: no instances
    for gpu in gpus:
        base = os.path.join(root, gpu, "mig")
        try:
            gis = sorted(n for n in os.listdir(base) if n.startswith("gi"))
        except OSError:
            continue
        for gi in gis:
            try:
                cis = sorted(n for n in os.listdir(os.path.join(base, gi)) if n.startswith("ci"))
            except OSError:
                cis = []
            out.append(f"{gpu}/{gi}:" + ",".join(cis))
            if len(out) >= MAX_MIG_INSTANCES:
                return out
    return out


def _read(path: str, limit: int, what: str, trusted: bool) -> tuple[str | None, list | None]:
    """(text, stamp); (None, None) when the file does not exist."""
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    if not os.path.exists(path):
        return None, None
    if trusted:
        from gpuhc.files.fsutil import UnsafePath, check_trusted_file

        try:
            check_trusted_file(path, what)
        except UnsafePath as e:
            raise GpuMapError(str(e)) from None
    try:
        data = read_bounded(path, limit, what)
    except UntrustedInputError as e:
        raise GpuMapError(str(e)) from None
    return data.decode("utf-8", errors="replace"), stamp_of(path)
