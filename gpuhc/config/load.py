"""gpuhc.yaml: load, validate before anything runs, apply per-host overrides.

A config error must never end in a drained node, so the whole file is validated up front and
every error names file, line and key. The schema is assembled from the core sections below and
the sections each subsystem declares next to its own code (``gpuhc/<subsystem>/settings.py``);
the ``hosts:`` overrides are read and matched by :mod:`gpuhc.config.hosts`.
"""

from __future__ import annotations

import copy
import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from gpuhc.config import hosts as config_hosts
from gpuhc.config.hosts import expand, host_matches  # noqa: F401 - re-exported: callers import them from here
from gpuhc.errors import ConfigError, ConfigErrors
from gpuhc.model.record import Record
from gpuhc.text.schema import Key, deep_merge, defaults, did_you_mean
from gpuhc.text.yamlpos import line_of, load_file_text, read_text

DEFAULT_PATH = "/etc/gpuhc/gpuhc.yaml"
DEFAULT_STATE_DIR = "/var/lib/gpuhc"


def _profile_help() -> str:
    """node.profile's help, naming the shipped profile files (listed, not parsed: this runs on
    every import of the config)."""
    from gpuhc.config.profiles import shipped_names

    return ("force a GPU profile instead of choosing one from the GPU names: "
            + (", ".join(shipped_names()) or "none shipped") + " (gpuhc/data/profiles/<name>.yaml)")


def _evidence_schema() -> dict[str, Any]:
    from gpuhc.catalog.evidence import schema

    return schema()


CORE_SCHEMA: dict[str, Any] = {
    "node": {
        "expected_gpus": Key(int, None, "GPUs this node must have; default: the baseline's count", min=0, nullable=True),
        "profile": Key(str, None, _profile_help(), nullable=True),
        "baseline": Key(str, None, "path of a `gpuhc baseline capture` file", nullable=True),
        "gres_conf": Key(str, None, "Slurm's gres.conf, to map Slurm's GPU numbers to GPUs (docs/checks.md, "
                         "'Slurm's GPU numbers'); default: beside $SLURM_CONF, else /etc/slurm/gres.conf", nullable=True),
    },
    "sources": {
        "nvml_scenario": Key(str, None, "replay this scenario instead of reading NVML", nullable=True),
        "test_scenario": Key(str, None, "site test mode: replay this scenario as this node, its events happening when "
                             "the file (or a root-owned link to it) was put in place (README, 'Try it under Slurm "
                             "without GPUs')", nullable=True),
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
    # How long the node around the GPUs must keep its evidence before it drains (docs/checks.md,
    # "Evidence to act"); the defaults and why are declared with the table, gpuhc/catalog/evidence.py
    "evidence": _evidence_schema(),
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
    "hooks": "gpuhc.export.hooks",
    "fleet": "gpuhc.fleet.settings",
    "canary": "gpuhc.canary.settings",
}

_CHECK_KEYS = {
    "enabled": Key(bool, True),
    "timeout_s": Key(float, None, min=0.1, max=3600.0, nullable=True),
    "thresholds": Key(dict, {}),
}


@dataclass(eq=False, repr=False)
class Config(Record):
    """A validated gpuhc.yaml, this host's overrides applied, with the line of every key."""

    data: dict[str, Any]
    path: str | None = None  # None: built-in defaults only
    hostname: str | None = None
    lines: dict = field(default_factory=dict)
    # The hosts: entries as (pattern, settings), and the settings before any of them applied:
    # what `gpuhc doctor` needs to say which entry and count every other node gets, and what
    # `config validate` checks the files of (every entry's, not only this host's).
    overrides: list = field(default_factory=list)
    top: dict = field(default_factory=dict)

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
    raw, lines = load_file_text(text, path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping of sections", path, 1)
    hosts = raw.pop("hosts", [])
    errs = _Errors(path, lines)
    _validate_all(raw, sch, (), errs)
    overrides = config_hosts.validate(hosts, errs, lambda settings, here: _validate_all(settings, sch, here, errs))
    errs.raise_any()
    top = deep_merge(defaults(sch), raw)
    data = config_hosts.apply(top, overrides, hostname)
    return Config(data, path, hostname, lines, overrides, top)


class _Errors:
    """Every error in one config file, so `gpuhc config validate` lists them all at once (each
    with file, line and key) instead of one per edit-and-retry."""

    def __init__(self, file: str, lines: dict):
        self.file, self.lines = file, lines
        self.found: list[ConfigError] = []

    def add(self, message: str, where: tuple, key: str | None = None) -> None:
        self.found.append(ConfigError(message, self.file, line_of(self.lines, where),
                                      key if key is not None else _dotted(where) or None))

    def count(self) -> int:
        return len(self.found)

    def raise_any(self) -> None:
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            raise ConfigErrors(sorted(self.found, key=lambda e: e.line or 0))


def _validate_all(raw: dict, sch: dict, prefix: tuple, errs: _Errors) -> None:
    """One document (the top level, or one ``hosts`` entry) against the schema."""
    _validate(raw, sch, prefix, errs, top=True)
    _validate_checks(raw.get("checks", {}), prefix, errs)
    _validate_profile(raw, prefix, errs)
    _validate_subsystems(raw, sch, prefix, errs)


def _validate_subsystems(raw: dict, sch: dict, prefix: tuple, errs: _Errors) -> None:
    """Rules a flat schema cannot say (sizes in order, threshold tables): a subsystem's settings
    module may define ``validate(section, file, lines, path)``, raising ConfigError. It runs on a
    section whose keys and types passed (it may rely on them), and gives its first error."""
    for name, module in SUBSYSTEM_SECTIONS.items():
        if name not in raw:
            continue
        section = _dotted(prefix + (name,))
        if any(e.key == section or (e.key or "").startswith(section + ".") for e in errs.found):
            continue
        check = getattr(importlib.import_module(module), "validate", None)
        if check is not None:
            try:
                check(raw[name], errs.file, errs.lines, prefix + (name,))
            except ConfigError as e:
                errs.found.append(e)


def _validate(raw: dict, sch: dict, path: tuple, errs: _Errors, top: bool = False) -> None:
    for key, value in raw.items():
        here = path + (key,)
        if key not in sch:
            if top and key == "checks":  # validated by _validate_checks
                continue
            names = set(map(str, sch)) | ({"checks", "hosts"} if top and not path else set())
            known = ", ".join(sorted(names)) or "(none)"
            errs.add(f"unknown key{did_you_mean(key, names)} (known here: {known})", here)
            continue
        spec = sch[key]
        if isinstance(spec, dict):
            if value is None:
                continue
            if not isinstance(value, dict):
                errs.add("must be a mapping", here)
                continue
            _validate(value, spec, here, errs)
        else:
            why = spec.check(value) or _not_finite(value)
            if why:
                errs.add(why, here)


def _validate_checks(checks: Any, prefix: tuple, errs: _Errors) -> None:
    """``checks: {<id>: {enabled, timeout_s, thresholds}}``; ids and threshold names must exist."""
    if not isinstance(checks, dict):
        errs.add("must be a mapping of check id to settings", prefix + ("checks",))
        return
    if not checks:
        return
    known = known_check_thresholds()
    validators = _threshold_validators()
    for cid, settings in checks.items():
        here = prefix + ("checks", cid)
        if cid not in known:
            errs.add(f"unknown check{did_you_mean(cid, known)} (known: {', '.join(sorted(known))})", here)
            continue
        if not isinstance(settings, dict):
            errs.add("must be a mapping", here)
            continue
        before = errs.count()
        _validate(settings, _CHECK_KEYS, here, errs)
        thresholds = settings.get("thresholds") or {}
        if not isinstance(thresholds, dict):
            continue  # reported by _validate
        for tkey, tval in thresholds.items():
            where = here + ("thresholds", tkey)
            if tkey not in known[cid]:
                names = ", ".join(sorted(known[cid])) or "(none)"
                errs.add(f"unknown threshold{did_you_mean(tkey, known[cid])} (known: {names})", where)
                continue
            why = _bad_threshold(tkey, known[cid].get(tkey), tval)
            if why:
                errs.add(why, where)
        validate = validators.get(cid)
        if validate is not None and thresholds and errs.count() == before:
            problems = validate({**known[cid], **thresholds})
            # A default that clashes with a value set here (warn_fraction under a too-high
            # min_fraction) is a consequence: name the value set, unless it is fine alone.
            written = [p for p in problems if p.partition(": ")[0].split(".")[0] in thresholds]
            for problem in written or problems:
                key, _, why = problem.partition(": ")
                where = here + ("thresholds", *(int(k) if k.isascii() and k.isdigit() else k for k in key.split(".")))
                errs.add(why or problem, where, _dotted(here + ("thresholds", key)))


def _bad_threshold(key: str, default: Any, value: Any) -> str | None:
    """Why a threshold value cannot be right, or None.

    Every threshold, passive or active, is a count, a size, a time, a temperature, a rate or a
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


def known_check_thresholds() -> dict[str, dict[str, Any]]:
    """check id -> its threshold names with their defaults, passive and active alike. (A profile
    cannot add a name: its loader refuses any the check does not declare.)"""
    from gpuhc.checks import all_checks

    return {check.id: dict(check.defaults) for check in all_checks()}


def _validate_profile(raw: dict, prefix: tuple, errs: _Errors) -> None:
    """``node.profile`` must name a shipped profile: otherwise only a run would find out."""
    node = raw.get("node")
    name = node.get("profile") if isinstance(node, dict) else None
    if not isinstance(name, str):
        return  # absent, or the wrong type (reported by _validate)
    from gpuhc.config.profiles import profile_names

    known = profile_names()
    if name not in known:
        errs.add(f"unknown GPU profile {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})",
                 prefix + ("node", "profile"))


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def check_file_safety(path: str, what: str) -> None:
    """As root, refuse a config (or baseline) that someone else could have written or swapped
    (:func:`gpuhc.files.fsutil.check_trusted_file`): it decides which nodes get drained and which
    programs run, so a writable one is a privilege escalation."""
    from gpuhc.files.fsutil import UnsafePath, check_trusted_file

    try:
        check_trusted_file(path, what)
    except UnsafePath as e:
        raise ConfigError(str(e), path) from None
