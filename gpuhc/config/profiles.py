"""GPU profiles: what "healthy" means for one GPU model, in one file per model.

A check's thresholds come in three layers, later ones winning: the check's own ``defaults``
(model-agnostic and conservative), the GPU profile selected here (model facts: NVLink count,
power limit, PCIe generation, temperature limits, expected speeds), and the site's
``checks.<id>.thresholds``. The same file holds the passive checks', the active checks' and
the multi-node sweep's numbers for its model, so adding a GPU model is one data file:
``gpuhc/data/profiles/<name>.yaml``, which a site can read to see what gpuhc expects.

Profile file shape::

    name: h100-sxm                # must equal the file name
    description: one line
    match: ['H100 80GB HBM3']     # case-insensitive regular expressions searched in the NVML name
    exclude: ['PCIe', 'NVL']      # names matching any of these never select this profile
    thresholds:                   # a section per check id, passive or active, keys as in its defaults
      nvlink: {expected_active: 18}     # from public specs: ...
      hbm: {gbps: 3000}                 # measured here: ...
    sweep: {large_busbw_gbs: 350}  # the nccl sweep's bounds for groups of this model

Every value carries a comment saying where it comes from: "from public specs" (a datasheet,
named) or "measured here" (a run recorded in docs/verification*.md). The profile named
``generic`` has no ``match`` and is the fallback: it must not carry model facts (an unknown
GPU's NVLink count is unknown, so "n/a", not "fail"). A profile without a ``sweep`` section
gets generic's: no absolute multi-node bounds until someone measured some.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuhc.errors import ConfigError
from gpuhc.model.record import FrozenRecord
from gpuhc.text.yamlpos import line_of, load_file_text

if TYPE_CHECKING:
    from gpuhc.checks.base import Declared

GENERIC = "generic"
PROFILE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "profiles")
_TOP_KEYS = ("name", "description", "match", "exclude", "thresholds", "sweep")
_SCALARS = (int, float, str, bool, type(None))


@dataclass(frozen=True, eq=False, repr=False)
class Profile(FrozenRecord):
    """One GPU model's thresholds, as read from its profile file."""

    name: str
    description: str = ""
    match: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str | None = None
    sweep: dict[str, Any] | None = None  # None: no sweep section in the file

    def matches(self, gpu_name: str) -> bool:
        """True when the NVML name matches one ``match`` pattern and no ``exclude`` pattern."""
        if not self.match:
            return False
        if any(re.search(p, gpu_name, re.IGNORECASE) for p in self.exclude):
            return False
        return any(re.search(p, gpu_name, re.IGNORECASE) for p in self.match)

    def for_check(self, check_id: str) -> dict[str, Any]:
        """This profile's thresholds for one check (a copy: callers merge into it)."""
        return dict(self.thresholds.get(check_id, {}))


def load_profile_file(path: str, declared: tuple[dict, dict] | None = None) -> Profile:
    """Read and validate one profile; every error names the file, line and key. ``declared``:
    the checks' defaults and validators, when the caller reads several files."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read profile: {e}", path) from None
    raw, lines = load_file_text(text, path)
    if not isinstance(raw, dict):
        raise ConfigError("a profile must be a mapping with name, match and thresholds", path, 1)

    def bad(msg: str, *key: Any) -> ConfigError:
        return ConfigError(msg, path, line_of(lines, key), ".".join(map(str, key)) or None)

    from gpuhc.text.schema import did_you_mean

    for key in raw:
        if key not in _TOP_KEYS:
            raise bad(f"unknown key{did_you_mean(key, _TOP_KEYS)} (known: {', '.join(_TOP_KEYS)})", key)
    name = raw.get("name")
    stem = os.path.splitext(os.path.basename(path))[0]
    if name != stem:
        raise bad(f"name must be the file name {stem!r}, got {name!r}", "name")
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise bad("must be a string", "description")
    patterns: dict[str, tuple[str, ...]] = {}
    for key in ("match", "exclude"):
        items = raw.get(key) or []
        if not isinstance(items, list):
            raise bad("must be a list of regular expressions", key)
        for i, pat in enumerate(items):
            if not isinstance(pat, str) or not pat:
                raise bad("must be a non-empty string", key, i)
            try:
                re.compile(pat)
            except re.error as e:
                raise bad(f"bad regular expression {pat!r}: {e}", key, i) from None
        patterns[key] = tuple(items)
    if name == GENERIC and patterns["match"]:
        raise bad("the generic profile is the fallback and must not match names", "match")
    if name != GENERIC and not patterns["match"]:
        raise bad("a model profile needs at least one match pattern", "match")
    thresholds = raw.get("thresholds") or {}
    if not isinstance(thresholds, dict):
        raise bad("must be a mapping of check id to thresholds", "thresholds")
    declared, declared_validators = declared or _declared_checks()
    for cid, section in thresholds.items():
        if not isinstance(section, dict):
            raise bad("must be a mapping of threshold name to value", "thresholds", cid)
        if cid not in declared:
            raise bad(f"unknown check{did_you_mean(cid, declared)} (known: {', '.join(sorted(declared))})",
                      "thresholds", cid)
        defaults = declared[cid]
        for k, v in section.items():
            # A mapping only where the check's default is one (gpu-speed.tflops per precision).
            if not (_plain(v) or (isinstance(defaults.get(k), dict) and isinstance(v, dict)
                                  and all(_plain(x) for x in v.values()))):
                raise bad("must be a number, string, boolean, null or a list of those", "thresholds", cid, k)
            if k not in defaults:
                # a key the check does not read would silently do nothing
                raise bad(f"unknown threshold{did_you_mean(k, defaults)} (known: {', '.join(sorted(defaults))})",
                          "thresholds", cid, k)
        validate = declared_validators.get(cid)
        for problem in (validate({**defaults, **section}) if validate is not None else []):
            key, _, why = problem.partition(": ")
            raise bad(why or problem, "thresholds", cid, *key.split("."))
    sweep = raw.get("sweep")
    if sweep is not None:
        if not isinstance(sweep, dict):
            raise bad("must be a mapping of sweep threshold name to value", "sweep")
        from gpuhc.sweep.settings import THRESHOLD_KEYS

        for k, v in sweep.items():
            if k not in THRESHOLD_KEYS:  # the sweep would read the defaults and say nothing
                raise bad(f"unknown sweep threshold{did_you_mean(k, THRESHOLD_KEYS)} (known: "
                          f"{', '.join(sorted(THRESHOLD_KEYS))})", "sweep", k)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
                raise bad("must be a number or null", "sweep", k)
    return Profile(
        name=name,
        description=description,
        match=patterns["match"],
        exclude=patterns["exclude"],
        thresholds={str(c): dict(s) for c, s in thresholds.items()},
        path=path,
        sweep=dict(sweep) if sweep is not None else None,
    )


def _plain(v: Any) -> bool:
    return isinstance(v, _SCALARS) or (isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v))


def _declared_checks() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """check id -> its threshold defaults (what a profile may set), and -> its validator."""
    from gpuhc.checks import all_checks

    checks = all_checks()
    return {c.id: c.defaults for c in checks}, {c.id: c.validate for c in checks if c.validate is not None}


def load_profiles(directory: str) -> dict[str, Profile]:
    """Every ``*.yaml`` profile in ``directory``, by name; a generic profile must be among them."""
    try:
        names = _file_names(directory)
    except OSError as e:
        raise ConfigError(f"cannot list profiles: {e.strerror}", directory) from None
    declared = _declared_checks()
    profiles = {p.name: p for p in (load_profile_file(os.path.join(directory, f"{n}.yaml"), declared) for n in names)}
    if GENERIC not in profiles:
        raise ConfigError("no generic.yaml profile (the fallback for unknown GPUs)", directory)
    return profiles


def _file_names(directory: str) -> list[str]:
    """The profiles in ``directory`` by file name, which is each profile's name."""
    return sorted(n[: -len(".yaml")] for n in os.listdir(directory) if n.endswith(".yaml"))


def shipped_names() -> list[str]:
    """The shipped profiles' names, from the file names alone: cheap enough for the config
    schema's help on every run (``profile_names`` parses every file); none when unreadable."""
    try:
        return _file_names(PROFILE_DIR)
    except OSError:
        return []


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Profile]:
    # Loaded on first use only: a prolog that never needs a profile should not parse YAML.
    return load_profiles(PROFILE_DIR)


def all_profiles() -> list[Profile]:
    """The profiles shipped with gpuhc, sorted by name."""
    return [p for _, p in sorted(_shipped().items())]


def profile_names() -> list[str]:
    return sorted(_shipped())


def profile_named(name: str | None) -> Profile:
    """The shipped profile of that name, or ``generic`` (an unknown model: no expectations)."""
    profiles = _shipped()
    return profiles.get(name or GENERIC) or profiles[GENERIC]


def select_profile(gpu_name: str | None, forced: str | None = None) -> Profile:
    """The profile for a GPU model: ``forced`` by name (config ``node.profile``), else the first
    profile (by name) whose patterns match the NVML name, else ``generic``."""
    profiles = _shipped()
    if forced:
        if forced not in profiles:
            raise ConfigError(f"unknown GPU profile {forced!r} (known: {', '.join(sorted(profiles))})", key="node.profile")
        return profiles[forced]
    if gpu_name:
        for name in sorted(profiles):
            if profiles[name].matches(gpu_name):
                return profiles[name]
    return profiles[GENERIC]


def select_profile_for(gpu_names: list[str], forced: str | None = None) -> Profile:
    """The profile for a node, given every GPU's NVML name.

    The first name that selects a model profile wins, so a GPU that NVML lost (the live source
    names it ``unknown (NVML: ...)``) does not drop the whole node to ``generic`` — which would
    silently stop the NVLink count and power checks exactly when the node is sick.
    """
    if forced:
        return select_profile(None, forced)
    for name in gpu_names:
        prof = select_profile(name)
        if prof.name != GENERIC:
            return prof
    return select_profile(None)


def effective_thresholds(check: "Declared", profile: Profile | None,
                         overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``ctx.thresholds`` should be for ``check``: defaults, then profile, then config.

    A check that declares ``nested_thresholds`` (the active checks' per-precision tables)
    merges mappings key by key; the others replace a value whole."""
    layers = (profile.for_check(check.id) if profile is not None else {}, overrides or {})
    if check.nested_thresholds:
        from gpuhc.text.schema import deep_merge

        merged = deep_merge(check.defaults, {})
        for layer in layers:
            merged = deep_merge(merged, layer)
        return merged
    merged = dict(check.defaults)
    for layer in layers:
        merged.update(layer)
    return merged
