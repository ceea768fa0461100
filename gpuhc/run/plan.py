"""How a run is planned: which checks run with which settings (``select_checks``, each check's
``Effective`` settings resolved once from the config), and how the run reads its sources: the
selected checks' declared needs, merged into one SourceSpec.

A check says which sources it reads (``Check.needs``) and, through ``Check.source_needs``, how:
how long the occupancy reader waits, which slice of the NVLink links is read, what the activity
and host readers read, whether the clocks are sampled more than once (``SourceNeeds``,
gpuhc/checks/base.py). This module asks every selected check and merges the answers field by
field, by the rule each field declares; it never asks for a check by id, so a new check's needs
reach the sources without a line here. A stage whose checks ask nothing reads the least: the
prolog imports no host or activity reader, and samples the clocks once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuhc.checks.base import Check, Declared, ReadContext
from gpuhc.config.load import Config
from gpuhc.model.record import FrozenRecord
from gpuhc.sources import SourceSpec


@dataclass(frozen=True, eq=False, repr=False)
class Effective(FrozenRecord):
    """One check's settings for this run, resolved once from the config: ``checks.<id>`` and
    the core keys the check declares it reads (``Check.from_config``)."""

    enabled: bool
    timeout_s: float  # the config's, else the check's default (0 for an active check: sized by workload)
    config: dict[str, Any]  # ``checks.<id>``, defaults filled in
    overrides: dict[str, Any]  # the config's layer of its thresholds; the profile goes beneath

    def thresholds(self, check: Declared, profile) -> dict[str, Any]:
        from gpuhc.config.profiles import effective_thresholds

        return effective_thresholds(check, profile, self.overrides)


def resolve(check: Declared, config: Config) -> Effective:
    settings = config.check_settings(check.id)
    core = {name: config.section(section).get(key) for name, (section, key) in check.from_config.items()}
    overrides = {name: value for name, value in core.items() if value is not None}
    overrides.update(settings.get("thresholds") or {})
    return Effective(bool(settings["enabled"]), float(settings["timeout_s"] or check.timeout_s), settings, overrides)


def select_checks(stage: str, config: Config, only: tuple[str, ...] = (),
                  also: tuple[str, ...] = ()) -> list[tuple[Check, Effective]]:
    """The stage's enabled passive checks (only those named by ``only``, when given), plus the
    passive checks named by ``also``, each with its settings resolved."""
    from gpuhc.checks import checks_for_stage, passive_checks

    stage_checks = checks_for_stage(stage)
    have = {c.id for c in stage_checks}
    extra = [c for c in passive_checks() if c.id in also and c.id not in have] if also else []
    chosen = [(c, resolve(c, config)) for c in stage_checks + extra if not only or c.id in only]
    return [(c, eff) for c, eff in chosen if eff.enabled]


def plan_sources(spec: SourceSpec, checks: list[tuple[Check, Effective]], stage: str,
                 prev_checks: dict[str, Any], gpus: list[int] | None, job: Any) -> SourceSpec:
    """``spec`` (where to read from) with how to read it for these checks, this stage and
    their remembered state; ``gpus`` and ``job`` are the stage's."""
    asked = [(check, check.source_needs(_read_context(check, eff, stage, prev_checks)))
             for check, eff in checks if check.source_needs is not None]
    needs = [n for _, n in asked]
    settle = [n.occupancy_settle_mib for n in needs if n.occupancy_settle_mib is not None]
    rotation, phases = next((n.dl_slice for n in needs if n.dl_slice is not None), (1, {}))
    activity = [n.activity for n in needs if n.activity is not None]
    return replace(
        spec, gpus=gpus, job=job,
        clock_samples=spec.clock_samples if any(n.clock_samples for n in needs) else 1,
        occupancy_wait_s=max((n.occupancy_wait_s for n in needs), default=0.0),
        occupancy_settle_mib=min(settle) if settle else None,
        occupancy_allowed=tuple(sorted({r for n in needs for r in n.occupancy_allowed})),
        dl_rotation=rotation, dl_phases=phases,
        activity={k: v for a in activity for k, v in a.items()} if activity else None,
        host=_host_settings({c.id: n.host for c, n in asked if n.host is not None}),
    )


def _read_context(check: Check, eff: Effective, stage: str, prev_checks: dict[str, Any]) -> ReadContext:
    """The check's defaults under the config's thresholds (no profile: it is chosen from the GPU
    names this very read brings), its timeout and its stored state."""
    return ReadContext(stage=stage, thresholds={**check.defaults, **eff.overrides}, timeout_s=eff.timeout_s,
                       prev=prev_checks.get(check.id))


def _host_settings(by_check: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What the host reader reads: only what the asking checks judge, by their thresholds
    (gpuhc/sources/host.py ``settings_for``). None, and nothing imported, when no check asks
    (the prolog)."""
    if not by_check:
        return None
    from gpuhc.sources.host import settings_for

    return settings_for(by_check)
