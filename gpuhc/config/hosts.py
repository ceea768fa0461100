"""Per-host overrides in gpuhc.yaml: ``hosts: [{match: <hostlist or glob>, ...settings}]``.

One file serves a whole cluster, and some nodes differ (a partition of PCIe cards, a rack with
one IB port down for good). Each entry's settings are validated like the top level (by the
caller, who knows the schema) and merged on top of it, in file order, on every node whose name
its pattern matches. Patterns are Slurm hostlists (``gpu[001-064]``), expanded with
python-hostlist, or shell globs (``gpu*``).
"""

from __future__ import annotations

import copy
import fnmatch
from typing import Any, Callable

from gpuhc.text.schema import deep_merge

Override = tuple[str, dict[str, Any]]  # (pattern, settings)


def expand(pattern: str) -> list[str]:
    """A hostlist's node names (a glob stands for itself); ValueError when it is malformed."""
    import hostlist

    if any(c in pattern for c in "*?"):
        return [pattern]
    try:
        return hostlist.expand_hostlist(pattern)
    except hostlist.BadHostlist as e:
        raise ValueError(str(e)) from None


def host_matches(hostname: str, pattern: str) -> bool:
    """Hostlist (``gpu[001-064]``) or glob (``gpu*``) match; also tries the short host name."""
    names = {hostname, hostname.split(".")[0]}
    if any(c in pattern for c in "*?"):
        return any(fnmatch.fnmatchcase(n, pattern) for n in names)
    return bool(names & set(expand(pattern)))


def validate(hosts: Any, errs, validate_settings: Callable[[dict, tuple], None]) -> list[Override]:
    """The ``hosts`` list read into overrides. Every problem goes to ``errs`` (``add(message,
    key path)``) so the file is checked whole; ``validate_settings(settings, key path)`` checks
    an entry's settings against the schema."""
    if hosts in (None, []):
        return []
    if not isinstance(hosts, list):
        errs.add("must be a list of {match: <hostlist>, ...overrides}", ("hosts",))
        return []
    out = []
    for i, item in enumerate(hosts):
        here = ("hosts", i)
        if not isinstance(item, dict) or not isinstance(item.get("match"), str):
            errs.add("each entry needs `match: <hostlist pattern>`", here)
            continue
        try:
            expand(item["match"])
        except ValueError as e:
            errs.add(f"bad hostlist: {e}", here + ("match",))
        settings = {k: v for k, v in item.items() if k != "match"}
        if "hosts" in settings:
            errs.add("hosts entries cannot nest", here + ("hosts",))
            settings.pop("hosts")
        validate_settings(settings, here)
        out.append((item["match"], copy.deepcopy(settings)))
    return out


def apply(data: dict[str, Any], overrides: list[Override], hostname: str | None) -> dict[str, Any]:
    """``data`` with the settings of every entry matching ``hostname`` merged on, in file order."""
    for pattern, settings in overrides:
        if hostname and host_matches(hostname, pattern):
            data = deep_merge(data, settings)
    return data
