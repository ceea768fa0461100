"""Sub-codes of the NVLink 5 Xids 144-150: the unit and error status in the Xid line, decoded by
driver branch into NVIDIA's verdict for that sub-code (data: ``gpuhc/data/xid_subcodes.yaml``,
where the table's source and layout are described). Pure; loaded on first use.

Why: one Xid number covers sub-codes NVIDIA answers with "reset the GPU" and others it answers
with "no action" (an RLW_REMAP status 0x40 against 0x100, say). Judging the number alone either
drains on noise or misses a fatal link unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuhc.errors import ConfigError
from gpuhc.model.result import Action

FILE = Path(__file__).parent.parent / "data" / "xid_subcodes.yaml"
CODES = range(144, 151)
R575 = 575  # NVIDIA's table: intrInfo is coded one way before this driver branch, another from it
_RANK = {"IGNORE": 0, "XID_154_EVAL": 1, "RESET_GPU": 2}  # worst bucket wins among several bits
# "...: 145, RLW_REMAP Nonfatal XC0 i0 Link 13 (0x00000082 0x00000040 ...": unit, intrInfo, status
_LINE = re.compile(r"\): (1(?:4[4-9]|50)), ([A-Z0-9_]{2,40})\b[^()]{0,80}\((0x[0-9a-fA-F]{1,8}) (0x[0-9a-fA-F]{1,8})\b")
_MAJOR = re.compile(r"(\d{2,4})\.")


@dataclass(frozen=True)
class SubVerdict:
    """What one Xid 144-150 line decodes to."""

    code: int
    unit: str  # as NVIDIA's table names it ("RLW_REMAP", "TLW_RX/TLW_RX_PIPE0")
    status: int
    bucket: str  # NVIDIA's immediate action: RESET_GPU, IGNORE, XID_154_EVAL
    severity: str
    action: Action
    branch: str  # "v1" (before R575) or "v2"

    @property
    def label(self) -> str:
        return f"{self.unit} status 0x{self.status:08x} ({self.bucket} in NVIDIA's 144-150 decode)"


def decode(code: int, message: str, driver_version: str | None) -> SubVerdict | None:
    """The sub-code verdict of an Xid 144-150 ``message``, or None when it does not decode
    (another code, a line without the register dump, a unit or status NVIDIA does not list):
    then the Xid's own catalog verdict stands."""
    m = _LINE.search(message)
    if code not in CODES or not m or int(m.group(1)) != code:
        return None
    printed, intr, status = m.group(2), int(m.group(3), 16), int(m.group(4), 16)
    for branch in _branches(driver_version):
        unit = _unit(code, branch, intr, printed)
        if unit is not None:
            return _judge(code, unit, branch, intr, status)
    return None


def _branches(driver_version: str | None) -> tuple[str, ...]:
    """The decodes to try, the driver's branch first. The other one second: a log that spans a
    driver update holds lines of both, and a decode only counts when the unit it finds is the
    one the line prints, so the wrong branch cannot pass for the right one."""
    m = _MAJOR.match(driver_version or "")
    if m and int(m.group(1)) < R575:
        return ("v1", "v2")
    return ("v2", "v1")


def _unit(code: int, branch: str, intr: int, printed: str) -> dict | None:
    if branch == "v1":
        if intr & 0x1F != (code - 143 if code < 150 else 0):
            return None
        index = (intr >> 5) & 0x1F
    else:
        index = intr & 0x7F
    for unit in units().get(code, ()):
        # the line prints the unit's name: it must be one of the names NVIDIA gives that row
        if unit[branch] == index and printed in unit["name"].split("/"):
            return unit
    return None


def _judge(code: int, unit: dict, branch: str, intr: int, status: int) -> SubVerdict | None:
    bucket = unit.get("any")
    table: dict[int, str] = unit.get("status") or {}
    if unit.get("match") == "value":
        bucket = table.get(status, bucket)
    elif table:
        hits = [b for bit, b in table.items() if status & bit] or ([table[0]] if status == 0 and 0 in table else [])
        two = unit.get("action2")
        if two and intr >> two[f"{branch}_bit"] & 1 and any(status & s for s in two["status"]):
            hits.append(two["bucket"])
        if hits:
            bucket = max(hits, key=_RANK.__getitem__)
    reasons = unit.get("reason")
    if reasons:
        bucket = reasons.get((intr >> 20) & 0x3F, bucket)
    if bucket is None:
        return None
    verdict = buckets()[bucket]
    return SubVerdict(code, unit["name"], status, bucket, verdict["severity"], Action(verdict["action"]), branch)


def table(code: int) -> list[dict[str, Any]]:
    """The sub-code rows of one Xid for ``gpuhc explain``: unit, status (or None for any), bucket
    and gpuhc's verdict."""
    rows = []
    for unit in units().get(code, ()):
        items = sorted((unit.get("status") or {}).items()) or [(None, unit["any"])]
        for status, bucket in items:
            v = buckets()[bucket]
            rows.append({"unit": unit["name"], "status": None if status is None else f"0x{status:08x}",
                         "nvidia": bucket, "severity": v["severity"], "action": v["action"]})
    return rows


@lru_cache(maxsize=None)
def _doc() -> dict:
    import yaml

    from gpuhc.text.yamlpos import safe_loader

    try:
        doc = yaml.load(FILE.read_text(encoding="utf-8"), Loader=safe_loader())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the sub-code table: {e}", file=str(FILE)) from e
    try:
        _validate(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"malformed sub-code table: {e!r}", file=str(FILE)) from e
    return doc


def buckets() -> dict[str, dict]:
    return _doc()["buckets"]


def units() -> dict[int, list[dict]]:
    return _doc()["units"]


def _validate(doc: Any) -> None:
    """Strict, like the catalog's loader: a typo here changes which GPUs are reset."""
    if not isinstance(doc, dict) or not isinstance(doc.get("buckets"), dict) or not isinstance(doc.get("units"), dict):
        raise ConfigError("want mappings 'buckets' and 'units'", file=str(FILE))
    for name, v in doc["buckets"].items():
        action = Action(v["action"])
        if name not in _RANK or v["severity"] not in ("fail", "warn") or (v["severity"] == "fail") != action.drains:
            raise ConfigError(f"bucket {name}: a fail must drain and a warn must not", file=str(FILE))
    for code, rows in doc["units"].items():
        for unit in rows:
            named = [b for b in [unit.get("any"), *(unit.get("status") or {}).values(),
                                 *(unit.get("reason") or {}).values()] if b is not None]
            if code not in CODES or not named or any(b not in doc["buckets"] for b in named):
                raise ConfigError(f"units.{code}.{unit.get('name')}: unknown code or bucket", file=str(FILE))
