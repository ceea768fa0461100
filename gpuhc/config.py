"""gpuhc.yaml: load, validate before anything runs, apply per-host overrides.

A config error must never end in a drained node, so the whole file is validated up front and
every error names file, line and key. The schema is assembled from the core sections below and
the sections each subsystem declares next to its own code (``gpuhc/<subsystem>/settings.py``).
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from gpuhc.errors import ConfigError
from gpuhc.schema import Key, deep_merge, defaults
from gpuhc.yamlpos import line_of, load_with_lines, read_text

DEFAULT_PATH = "/etc/gpuhc/gpuhc.yaml"
DEFAULT_STATE_DIR = "/var/lib/gpuhc"

_opt_str = Key(str, None, nullable=True)

CORE_SCHEMA: dict[str, Any] = {
    "node": {
        "expected_gpus": Key(int, None, "GPUs this node must have; default: the baseline's count", min=0, nullable=True),
        "profile": Key(str, None, "force a GPU profile (h100-sxm, h200-sxm, a100-sxm, generic)", nullable=True),
        "baseline": Key(str, None, "path of a `gpuhc baseline capture` file", nullable=True),
    },
    "sources": {
        "nvml_scenario": Key(str, None, "replay this scenario instead of reading NVML", nullable=True),
        "kernel_log": Key(str, None, "a recorded kernel log, or 'kmsg' / 'dmesg'", nullable=True),
        "sysfs_root": Key(str, None, "a directory standing in for / when reading sysfs", nullable=True),
        "clock_samples": Key(int, 3, "clock-event reason samples per run", min=1, max=50),
        "clock_sample_interval_s": Key(float, 0.02, min=0.0, max=1.0),
    },
    "state_dir": Key(str, DEFAULT_STATE_DIR, "per-node state (cursors, counter baselines, pass counts)"),
    "budget_s": {
        # Slurm kills HealthCheckProgram at 60 s; 45 s leaves room for the drain itself.
        "passive": Key(float, 45.0, min=1.0, max=600.0),
        "prolog": Key(float, 5.0, min=0.5, max=600.0),
        "epilog": Key(float, 30.0, min=1.0, max=3600.0),
        "bootstrap": Key(float, 600.0, min=1.0, max=7200.0),
    },
    "output": {
        "event_log": Key(str, None, "append one JSON line per run here", nullable=True),
        "prometheus_textfile": Key(
            str, None, "node_exporter textfile .prom path, one file per stage ({stage}, else -<stage> before .prom)", nullable=True
        ),
    },
}

# Subsystems that declare their own section; imported only when a config is validated.
SUBSYSTEM_SECTIONS = {
    "slurm": "gpuhc.slurm.settings",
    "active": "gpuhc.active.settings",
    "sweep": "gpuhc.sweep.settings",
    "hooks": "gpuhc.hooks",
    "fleet": "gpuhc.fleet.settings",
}

_CHECK_KEYS = {
    "enabled": Key(bool, True),
    "timeout_s": Key(float, None, min=0.1, max=3600.0, nullable=True),
    "thresholds": Key(dict, {}),
}


@dataclass
class Config:
    data: dict[str, Any]
    path: str | None = None  # None: built-in defaults only
    hostname: str | None = None
    lines: dict = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        return self.data.get(name) or {}

    def check_settings(self, check_id: str) -> dict[str, Any]:
        merged = {k: copy.deepcopy(v.default) for k, v in _CHECK_KEYS.items()}
        merged.update(self.data.get("checks", {}).get(check_id, {}))
        return merged


def schema() -> dict[str, Any]:
    full = dict(CORE_SCHEMA)
    for name, module in SUBSYSTEM_SECTIONS.items():
        try:
            full[name] = importlib.import_module(module).SCHEMA
        except ModuleNotFoundError as e:
            if e.name != module:  # a settings module that exists but is broken is a bug
                raise
            full[name] = {}
    return full


def default_path() -> str:
    return os.environ.get("GPUHC_CONFIG") or DEFAULT_PATH


def load_config(path: str | None = None, hostname: str | None = None) -> Config:
    """Load and validate; ``path=None`` means $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml.

    A missing *default* file gives built-in defaults (a node may run with no config at all); a
    missing file that was asked for by name is an error.
    """
    explicit = path is not None or bool(os.environ.get("GPUHC_CONFIG"))  # set but empty: unset
    path = path or default_path()
    sch = schema()
    if not os.path.exists(path):
        if explicit:
            raise ConfigError("config file not found", path)
        return Config(defaults(sch), None, hostname)
    check_file_safety(path, "config file")
    try:
        text = read_text(path)
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, or too large
        raise ConfigError(f"cannot read: {e}", path) from None
    raw, lines = load_with_lines(text, path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping of sections", path, 1)
    hosts = raw.pop("hosts", [])
    _validate(raw, sch, (), path, lines, top=True)
    _validate_checks(raw.get("checks", {}), path, lines)
    _validate_profile(raw, (), path, lines)
    _validate_subsystems(raw, (), path, lines)
    data = deep_merge(defaults(sch), raw)
    for override in _validate_hosts(hosts, sch, path, lines):
        pattern = override.pop("match")
        if hostname and host_matches(hostname, pattern):
            data = deep_merge(data, override)
    return Config(data, path, hostname, lines)


def _validate_subsystems(raw: dict, prefix: tuple, file: str, lines: dict) -> None:
    """Rules a flat schema cannot say (sizes in order, threshold tables): a subsystem's settings
    module may define ``validate(section, file, lines, path)``, raising ConfigError."""
    for name, module in SUBSYSTEM_SECTIONS.items():
        if name in raw:
            check = getattr(importlib.import_module(module), "validate", None)
            if check is not None:
                check(raw[name], file, lines, prefix + (name,))


def _validate(raw: dict, sch: dict, path: tuple, file: str, lines: dict, top: bool = False) -> None:
    for key, value in raw.items():
        here = path + (key,)
        dotted = _dotted(here)
        if key not in sch:
            if top and key == "checks":  # validated by _validate_checks
                continue
            names = set(map(str, sch)) | ({"checks", "hosts"} if top and not path else set())
            known = ", ".join(sorted(names)) or "(none)"
            raise ConfigError(f"unknown key (known here: {known})", file, line_of(lines, here), dotted)
        spec = sch[key]
        if isinstance(spec, dict):
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError("must be a mapping", file, line_of(lines, here), dotted)
            _validate(value, spec, here, file, lines)
        else:
            why = spec.check(value) or _not_finite(value)
            if why:
                raise ConfigError(why, file, line_of(lines, here), dotted)


def _validate_checks(checks: Any, file: str, lines: dict, prefix: tuple = ()) -> None:
    """``checks: {<id>: {enabled, timeout_s, thresholds}}``; ids and threshold names must exist."""
    if not isinstance(checks, dict):
        where = prefix + ("checks",)
        raise ConfigError("must be a mapping of check id to settings", file, line_of(lines, where), _dotted(where))
    if not checks:
        return
    known = known_check_thresholds()
    validators = _threshold_validators()
    for cid, settings in checks.items():
        here = prefix + ("checks", cid)
        if cid not in known:
            raise ConfigError(
                f"unknown check (known: {', '.join(sorted(known))})", file, line_of(lines, here), _dotted(here)
            )
        if not isinstance(settings, dict):
            raise ConfigError("must be a mapping", file, line_of(lines, here), _dotted(here))
        _validate(settings, _CHECK_KEYS, here, file, lines)
        for tkey, tval in (settings.get("thresholds") or {}).items():
            where = here + ("thresholds", tkey)
            dotted = _dotted(where)
            if known[cid] is not None and tkey not in known[cid]:
                names = ", ".join(sorted(known[cid])) or "(none)"
                raise ConfigError(f"unknown threshold (known: {names})", file, line_of(lines, where), dotted)
            if known[cid] is None:
                continue  # an active check: its own code judges its settings
            why = _bad_threshold(tkey, known[cid].get(tkey), tval)
            if why:
                raise ConfigError(why, file, line_of(lines, where), dotted)
        validate = validators.get(cid)
        given = settings.get("thresholds") or {}
        if validate is not None and given:
            for problem in validate({**known[cid], **given}):
                key, _, why = problem.partition(": ")
                where = here + ("thresholds", *(int(k) if k.isdigit() else k for k in key.split(".")))
                raise ConfigError(why or problem, file, line_of(lines, where), _dotted(here + ("thresholds", key)))


def _bad_threshold(key: str, default: Any, value: Any) -> str | None:
    """Why a threshold value cannot be right, or None.

    Every threshold of a passive check is a count, a size, a time, a temperature or a
    percentage (never negative), a word, or a list/mapping of those. A NaN compares false with
    everything and would silently pass a sick GPU; a window of 0 s would see no Xid at all."""
    bad = _not_plain(value)
    if bad:
        return bad
    if default is None:  # no default: an expected count or size, e.g. expected_gpus
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"must be a number or null, got {value!r}"
    elif not _same_kind(default, value):
        return f"must be like the default {default!r}, got {value!r}"
    for number in _numbers(value):
        if number < 0:
            return f"must not be negative, got {value!r}"
    if key.endswith("window_s") and isinstance(value, (int, float)) and value <= 0:
        return f"must be > 0, got {value!r}"
    return None


def _not_plain(value: Any) -> str | None:
    """Thresholds end up in JSON reports: YAML dates, binary and the like are refused."""
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return _not_finite(value)
    if isinstance(value, list):
        return next(filter(None, map(_not_plain, value)), None)
    if isinstance(value, dict):
        return next(filter(None, map(_not_plain, value.values())), None)
    return f"must be a number, string, boolean, null, or a list or mapping of those, got {type(value).__name__}"


def _not_finite(value: Any) -> str | None:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"must be a finite number, got {value!r}"
    return None


def _numbers(value: Any):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)


def _threshold_validators() -> dict[str, Any]:
    from gpuhc.checks import all_checks

    return {c.id: c.validate for c in all_checks() if c.validate is not None}


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) == isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def known_check_thresholds() -> dict[str, dict[str, Any] | None]:
    """check id -> known threshold names with defaults (None: accept any, for active checks)."""
    from gpuhc.checks import all_checks

    known: dict[str, dict[str, Any] | None] = {}
    for check in all_checks():
        known[check.id] = dict(check.defaults)
    try:
        from gpuhc.profiles import all_profiles

        for prof in all_profiles():
            for cid, section in prof.thresholds.items():
                if cid in known and known[cid] is not None:
                    for k, v in section.items():
                        known[cid].setdefault(k, v)
    except ImportError:
        pass
    try:
        from gpuhc.active import ACTIVE_CHECK_IDS

        for cid in ACTIVE_CHECK_IDS:
            known.setdefault(cid, None)
    except ImportError:
        pass
    return known


def _validate_hosts(hosts: Any, sch: dict, file: str, lines: dict) -> list[dict]:
    if hosts in (None, []):
        return []
    if not isinstance(hosts, list):
        raise ConfigError("must be a list of {match: <hostlist>, ...overrides}", file, line_of(lines, ("hosts",)), "hosts")
    out = []
    for i, item in enumerate(hosts):
        here = ("hosts", i)
        if not isinstance(item, dict) or not isinstance(item.get("match"), str):
            raise ConfigError("each entry needs `match: <hostlist pattern>`", file, line_of(lines, here), f"hosts[{i}]")
        try:
            expand(item["match"])
        except ValueError as e:
            raise ConfigError(f"bad hostlist: {e}", file, line_of(lines, here + ("match",)), f"hosts[{i}].match")
        rest = {k: v for k, v in item.items() if k != "match"}
        if "hosts" in rest:
            raise ConfigError("hosts entries cannot nest", file, line_of(lines, here + ("hosts",)), f"hosts[{i}].hosts")
        _validate(rest, sch, here, file, lines, top=True)
        _validate_checks(rest.get("checks", {}), file, lines, here)
        _validate_profile(rest, here, file, lines)
        _validate_subsystems(rest, here, file, lines)
        out.append(copy.deepcopy(item))
    return out


def _validate_profile(raw: dict, prefix: tuple, file: str, lines: dict) -> None:
    """``node.profile`` must name a shipped profile: otherwise only a run would find out."""
    name = (raw.get("node") or {}).get("profile")
    if name is None:
        return
    from gpuhc.profiles import profile_names

    known = profile_names()
    if name not in known:
        where = prefix + ("node", "profile")
        raise ConfigError(f"unknown GPU profile {name!r} (known: {', '.join(known)})", file,
                          line_of(lines, where), _dotted(where))


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def expand(pattern: str) -> list[str]:
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


def check_file_safety(path: str, what: str) -> None:
    """As root, refuse a file (or its directory) that someone else could have written.

    gpuhc runs as root and a config decides which nodes get drained and which programs run:
    a group- or world-writable file, or one owned by another user, is a privilege escalation.
    """
    if os.geteuid() != 0:
        return
    for p in (path, os.path.dirname(os.path.abspath(path))):
        try:
            st = os.stat(p)
        except OSError as e:
            raise ConfigError(f"cannot stat {p}: {e.strerror}", path) from None
        if st.st_uid != 0:
            raise ConfigError(f"refusing {what}: {p} is owned by uid {st.st_uid}, not root", path)
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
            raise ConfigError(f"refusing {what}: {p} is writable by group or others (chmod go-w)", path)
