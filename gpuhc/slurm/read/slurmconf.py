"""slurm.conf as this machine has it: its settings and its node lines, read locally.

Two users: the expected GPU count of a node (what Slurm says the node has: its ``Gres=`` in its
``NodeName`` line; gpuhc/expected.py) and ``gpuhc doctor`` (how gpuhc is wired into Slurm). Both
read the file slurmd reads, never slurmctld: a health check must send nothing to the controller
(docs/slurm.md, "What each run does").

Read as Slurm's slurm.conf(5) describes the format: ``Key=Value`` pairs separated by blanks, keys
case-insensitive, ``#`` to the end of the line a comment, a trailing backslash continues a line,
``Include FILE`` (a path relative to slurm.conf's directory, ``%c`` the ClusterName, shell
wildcards allowed) read in place. A ``NodeName=`` line names a hostlist (``gpu[001-064]``, several comma-separated), and
``NodeName=DEFAULT`` sets what the node lines after it inherit. Which file: ``$SLURM_CONF``,
else ``/etc/slurm/slurm.conf``, else the copy a configless slurmd keeps (``/run/slurm/conf``).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

DEFAULT_PATHS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")
MAX_BYTES = 16 * 1024 * 1024  # a whole file plus its includes: far beyond any site's
MAX_INCLUDE_DEPTH = 8  # an Include that includes itself stops here, with a message

_PAIR = re.compile(r'([A-Za-z][A-Za-z0-9_]*)=("[^"]*"|\S*)')
_COUNT = re.compile(r"^(\d+)([kKmMgGtTpP]?)$")
_SUFFIX = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4, "p": 1024 ** 5}


class SlurmConfError(Exception):
    """slurm.conf could not be read (missing, unreadable, an Include loop): the message says which."""


@dataclass
class NodeLine:
    names: str  # the hostlist as written (``gpu[001-064]``)
    settings: dict[str, str]  # its keys (lower case), NodeName=DEFAULT's folded in
    where: str  # file:line


@dataclass
class SlurmConf:
    path: str
    settings: dict[str, str] = field(default_factory=dict)  # key (lower case) -> value, last one wins
    where: dict[str, str] = field(default_factory=dict)  # key -> file:line
    nodes: list[NodeLine] = field(default_factory=list)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key.lower(), default)

    def node(self, name: str) -> NodeLine | None:
        """The node line that names ``name`` (the last, as Slurm keeps the last definition)."""
        short = name.split(".")[0]
        found = None
        for line in self.nodes:
            if names_node(line.names, short):
                found = line
        return found

    def node_names(self) -> list[str]:
        """Every node slurm.conf defines, in file order (duplicates once)."""
        seen: dict[str, None] = {}
        for line in self.nodes:
            for n in _expand_all(line.names):
                seen.setdefault(n, None)
        return list(seen)


def gpus_in(gres: str | None) -> int:
    """GPUs in a ``Gres=`` value: ``gpu:8``, ``gpu:h100:8``, ``gpu:a100:4,gpu:h100:4`` (summed),
    ``gpu:h100:8(S:0-1)``, ``gpu`` (one); other GRES (``mps``, ``shard``) and ``none`` count 0.
    A count Slurm would refuse raises ValueError."""
    total = 0
    for item in _split_top(gres or ""):
        item = re.sub(r"\(.*\)$", "", item.strip())
        if not item:
            continue
        parts = item.split(":")
        if parts[0].lower() != "gpu":
            continue
        if len(parts) == 1:
            total += 1
            continue
        m = _COUNT.match(parts[-1])
        if m is None:
            if len(parts) == 2:  # gpu:TYPE, no count: one
                total += 1
                continue
            raise ValueError(f"bad GPU count {parts[-1]!r} in Gres={gres}")
        total += int(m.group(1)) * _SUFFIX[m.group(2).lower()]
    return total


def find_path() -> str | None:
    """The slurm.conf slurmd reads: $SLURM_CONF, else the first default path that exists."""
    env = os.environ.get("SLURM_CONF")
    if env:
        return env
    return next((p for p in DEFAULT_PATHS if os.path.exists(p)), None)


def read(path: str | None = None) -> SlurmConf:
    """slurm.conf (``path``, else :func:`find_path`) with its includes; SlurmConfError when it
    cannot be read."""
    path = path or find_path()
    if path is None:
        raise SlurmConfError(f"no slurm.conf: $SLURM_CONF unset and none of {', '.join(DEFAULT_PATHS)} exists")
    conf = SlurmConf(path)
    _read_into(conf, path, os.path.dirname(path), [0], 0, {})
    return conf


def parse_text(text: str, path: str = "slurm.conf") -> SlurmConf:
    """One file's text (no Include followed): for tests and for a pasted file."""
    conf = SlurmConf(path)
    _parse(conf, text, path, os.path.dirname(path), [0], 0, {}, follow=False)
    return conf


def _read_into(conf: SlurmConf, path: str, base: str, budget: list[int], depth: int, default: dict) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise SlurmConfError(f"{path}: Include nested deeper than {MAX_INCLUDE_DEPTH} (does a file include itself?)")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1 - budget[0])
    except OSError as e:
        raise SlurmConfError(f"cannot read {path}: {e.strerror or e}") from None
    budget[0] += len(data)
    if budget[0] > MAX_BYTES:
        raise SlurmConfError(f"{path}: slurm.conf and its includes exceed {MAX_BYTES // (1024 * 1024)} MiB")
    _parse(conf, data.decode("utf-8", "replace"), path, base, budget, depth, default, follow=True)


def _parse(conf: SlurmConf, text: str, path: str, base: str, budget: list[int], depth: int, default: dict,
           follow: bool) -> None:
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        head, _, rest = line.partition(" ")
        if head.lower() == "include" and rest.strip():
            if follow:
                # %c: the ClusterName read so far (slurm.conf(5), "INCLUDE MODIFIERS")
                target = rest.strip().strip('"').replace("%c", conf.get("clustername", ""))
                target = target if os.path.isabs(target) else os.path.join(base, target)
                matches = sorted(glob.glob(target)) if any(c in target for c in "*?[") else [target]
                for one in matches:
                    _read_into(conf, one, base, budget, depth + 1, default)
            continue
        pairs = [(k.lower(), v.strip('"')) for k, v in _PAIR.findall(line)]
        if not pairs:
            continue
        first, value = pairs[0]
        if first == "nodename":
            settings = dict(pairs[1:])
            if value.upper() == "DEFAULT":
                default.update(settings)  # (shared by the includes: DEFAULT carries across files)
                continue
            conf.nodes.append(NodeLine(value, {**default, **settings}, where))
        elif first in ("partitionname", "nodeset", "frontendname", "downnodes", "switchname"):
            continue  # records of their own, not settings
        else:
            for key, v in pairs:
                conf.settings[key] = v
                conf.where[key] = where


def _logical_lines(text: str):
    """(first line number, line) with comments cut and backslash continuations joined."""
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            yield start, buf.strip()
        buf = ""
    if buf.strip():
        yield start, buf.strip()


def _split_top(value: str, brackets: str = "()") -> list[str]:
    """Split on commas outside ``brackets`` (``gpu:h100:8(S:0-1),mps:100``; ``gpu[1,3],dgx1``)."""
    if brackets[0] not in value:
        return value.split(",")
    o, c = map(re.escape, brackets)
    return re.findall(rf"(?:[^,{o}]|{o}[^{c}]*{c})+", value) or [""]


def names_node(hostlist: str, name: str) -> bool:
    """Does the hostlist (``gpu[001-064]``, ``r[1-2]n[01-32],login1``) name ``name``? Matched
    part by part without expanding it: the health check of a node in a cluster of thousands
    looks itself up on every run, and expanding every node line costs tens of milliseconds."""
    for part in _split_top(hostlist, "[]"):
        part = part.strip()
        ranges = re.findall(r"\[([^\]]*)\]", part)
        pattern = r"(\d+)".join(re.escape(piece) for piece in re.split(r"\[[^\]]*\]", part))
        if i_am := re.fullmatch(pattern, name) if ranges else (part == name):
            if not ranges or all(_in_range(num, spec) for num, spec in zip(i_am.groups(), ranges)):
                return True
    return False


def _in_range(number: str, spec: str) -> bool:
    """``number`` (as written in the name, zero-padding included) in a bracket's ``1-4,07,10-12``."""
    for item in spec.split(","):
        lo, _, hi = item.strip().partition("-")
        hi = hi or lo
        if not (lo.isascii() and hi.isascii() and lo.isdigit() and hi.isdigit()):
            continue
        if len(lo) > 1 and lo.startswith("0") and len(number) != len(lo):
            continue  # zero-padded ranges name only names of their width (gpu[001-064] is not gpu1)
        if int(lo) <= int(number) <= int(hi) and (len(lo) > 1 and lo.startswith("0") or not number.startswith("0")
                                                  or number == "0"):
            return True
    return False


def _expand_all(names: str) -> list[str]:
    import hostlist

    try:
        return hostlist.expand_hostlist(names)
    except hostlist.BadHostlist:
        return []  # a hostlist Slurm itself would refuse names no node gpuhc can look up


def slurm_gpus(node: str, path: str | None = None) -> tuple[int, str] | None:
    """(GPUs Slurm gives ``node``, where slurm.conf says so), or None when this machine has no
    readable slurm.conf, slurm.conf does not define the node, or its Gres= is one Slurm would
    refuse. A node line without a GPU in its Gres= is a CPU node: (0, where)."""
    try:
        line = read(path).node(node)
    except SlurmConfError:
        return None
    if line is None:
        return None
    try:
        return gpus_in(line.settings.get("gres")), line.where
    except ValueError:
        return None


def with_slurm_gpus(config, node: str):
    """``config`` with ``node.expected_gpus`` set to what slurm.conf gives ``node`` (and
    ``node.expected_gpus_from`` saying where), when slurm.conf says: Slurm's count comes before
    the baseline's and the config's (docs/slurm.md, "Expected GPUs"). Only for a node that reads
    its own GPUs: a replay (a test cluster's fake node, site test mode) is not the machine
    slurm.conf describes."""
    from dataclasses import replace

    found = slurm_gpus(node)
    if found is None:
        return config
    count, where = found
    data = dict(config.data)
    data["node"] = {**config.section("node"), "expected_gpus": count, "expected_gpus_from": f"slurm.conf ({where})"}
    return replace(config, data=data)
