"""A check's verdict: :class:`Result`, its :class:`Status` and the :class:`Action` it asks for."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
import enum
from dataclasses import dataclass
from typing import Any

from gpuhc.model.record import FrozenRecord


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    NA = "n/a"
    ERROR = "error"  # gpuhc could not judge (timeout, internal error): never a reason to drain

    @property
    def rank(self) -> int:
        return _STATUS_RANK[self]


_STATUS_RANK = {Status.PASS: 0, Status.NA: 0, Status.WARN: 1, Status.ERROR: 2, Status.FAIL: 3}


class Action(str, enum.Enum):
    """What a person (or the policy) should do about a result, mildest first."""

    NONE = "none"
    RESTART_APP = "restart app"
    RESET_GPU = "reset GPU"
    # MIG instances gone (a reboot or reset drops a layout nothing re-creates): an admin's step,
    # no ladder step and no lemon (gpuhc/checks/mig_layout.py)
    RECREATE_MIG = "drain + recreate MIG instances"
    DRAIN_REBOOT = "drain + reboot"
    DRAIN_TICKET = "drain + hardware ticket"

    @property
    def rank(self) -> int:
        return list(Action).index(self)

    @property
    def drains(self) -> bool:
        """Actions that take the node out of the schedule (a GPU reset needs it idle too)."""
        return self in (Action.RESET_GPU, Action.RECREATE_MIG, Action.DRAIN_REBOOT, Action.DRAIN_TICKET)


@dataclass(frozen=True, eq=False, repr=False)
class Result(FrozenRecord):
    """One verdict of one check on one subject (the node, a GPU, a link, a port)."""

    check: str  # check id, e.g. "xid"
    status: Status
    message: str  # one line, for humans and for the drain reason
    subject: str = "node"  # "node", "gpu3", "mlx5_0/1", "0000:b3:00.0"
    value: Any = None  # the measured value, JSON-able
    threshold: Any = None  # what it was compared against, JSON-able
    action: Action = Action.NONE
    # The class of evidence it is (gpuhc/catalog/evidence.py's table: what it buys, whether it counts
    # toward a lemon); None: its check's class
    evidence: str | None = None

    def to_dict(self) -> dict:
        extra = {"evidence": self.evidence} if self.evidence is not None else {}
        return {
            "check": self.check,
            "status": self.status.value,
            "subject": self.subject,
            "message": self.message,
            "value": self.value,
            "threshold": self.threshold,
            "action": self.action.value,
            **extra,
        }
