"""The XID and SXid catalogs: data in ``gpuhc/data/*_catalog.yaml``, loaded once, on first use.

Keeping the catalog as data means a site can read what gpuhc will do for every code (``gpuhc
explain xid``), and a reviewer can argue with one YAML line instead of code. The loader is
strict, because a typo here silently changes which nodes get drained: every entry must have a
known severity and action, a FAIL must carry a draining action and a WARN must not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuhc.errors import ConfigError
from gpuhc.model.result import Action

DATA = Path(__file__).parent.parent / "data"  # gpuhc/data
XID_FILE = DATA / "xid_catalog.yaml"
SXID_FILE = DATA / "sxid_catalog.yaml"
SEVERITIES = ("fail", "warn", "ignore")


@dataclass(frozen=True)
class XidInfo:
    code: int | None  # None for the default (unknown) entry
    name: str
    meaning: str
    severity: str  # fail | warn | ignore
    action: Action
    app: bool = False  # usually the application's fault, not the GPU's
    note: str = ""
    known: bool = True  # False: not in the catalog, these are the default's verdicts
    differs: str = ""  # why gpuhc's verdict is not NVIDIA's immediate action (tests/fixtures/xid_catalog/)
    # A fail entry drains once this many of it on one GPU are in the xid check's window; fewer warn.
    drain_after: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"xid": self.code, "name": self.name, "meaning": self.meaning, "severity": self.severity,
                "action": self.action.value, "app": self.app, "note": self.note, "known": self.known,
                **({"differs": self.differs} if self.differs else {}),
                **({"drain_after": self.drain_after} if self.drain_after > 1 else {})}


@dataclass(frozen=True)
class SxidInfo:
    code: int | None
    name: str
    meaning: str
    fatal: bool
    action: Action  # what a fatal occurrence asks for; non-fatal ones never drain
    known: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"sxid": self.code, "name": self.name, "meaning": self.meaning, "fatal": self.fatal,
                "action": self.action.value if self.fatal else Action.NONE.value, "known": self.known}


@dataclass
class _Catalog:
    default: Any
    entries: dict[int, Any] = field(default_factory=dict)
    signals: dict[str, XidInfo] = field(default_factory=dict)  # driver messages without an Xid


# ---------------------------------------------------------------------- lookups


def xid_info(code: int) -> XidInfo:
    """The catalog entry for ``code``; unknown codes get the default's verdict, known=False."""
    cat = _xids()
    info = cat.entries.get(code)
    if info is not None:
        return info
    d = cat.default
    return XidInfo(code, d.name, d.meaning, d.severity, d.action, d.app, d.note, known=False)


def signal_info(name: str) -> XidInfo:
    """What a driver signal without an Xid (``KernelEvent.state`` of a DRIVER event) means and
    asks for. A name the catalog lacks gets the unknown-Xid verdict (warn), known=False."""
    cat = _xids()
    info = cat.signals.get(name)
    if info is not None:
        return info
    d = cat.default
    return XidInfo(None, f"driver message {name}", d.meaning, d.severity, d.action, d.app, d.note, known=False)


def signal_table() -> dict[str, XidInfo]:
    return dict(sorted(_xids().signals.items()))


def sxid_info(code: int) -> SxidInfo:
    cat = _sxids()
    info = cat.entries.get(code)
    if info is not None:
        return info
    d = cat.default
    return SxidInfo(code, d.name, d.meaning, d.fatal, d.action, known=False)


def xid_table() -> dict[int, XidInfo]:
    return dict(sorted(_xids().entries.items()))


def sxid_table() -> dict[int, SxidInfo]:
    return dict(sorted(_sxids().entries.items()))


_RECOVERY = re.compile(r"\bto\s+(?:0x[0-9a-fA-F]+\s*)?\(([^)]*)\)")


def recovery_action(message: str) -> Action | None:
    """The action an Xid 154 ("GPU recovery action changed ... to 0x1 (GPU Reset Required)")
    asks for: Action.NONE when the GPU recovered, None when the message names nothing we know."""
    found = _RECOVERY.findall(message)
    text = (found[-1] if found else message).lower()
    if "reboot" in text:
        return Action.DRAIN_REBOOT
    if "reset" in text or "drain" in text:  # "GPU Reset Required", "Drain P2P", "Drain and Reset"
        return Action.RESET_GPU
    if found and text.strip() == "none":
        return Action.NONE
    return None


# ---------------------------------------------------------------------- loading


@lru_cache(maxsize=None)
def _xids() -> _Catalog:
    return load_xid_catalog(XID_FILE)


@lru_cache(maxsize=None)
def _sxids() -> _Catalog:
    return load_sxid_catalog(SXID_FILE)


def load_xid_catalog(path: Path | str) -> _Catalog:
    doc = _read_yaml(path)
    default = _xid_entry(path, "default", None, _mapping(path, doc.get("default"), "default"), known=False)
    entries: dict[int, XidInfo] = {}
    for key, body in _mapping(path, doc.get("xids"), "xids").items():
        body = _mapping(path, body, f"xids.{key}")
        for code in parse_codes(key, path, "xids"):
            if code in entries:
                raise ConfigError(f"Xid {code} listed twice", file=str(path), key=f"xids.{key}")
            entries[code] = _xid_entry(path, f"xids.{key}", code, body)
    signals = {str(name): _xid_entry(path, f"signals.{name}", None, _mapping(path, body, f"signals.{name}"))
               for name, body in _mapping(path, doc.get("signals") or {}, "signals").items()}
    return _Catalog(default, entries, signals)


def load_sxid_catalog(path: Path | str) -> _Catalog:
    doc = _read_yaml(path)
    action = _action(path, "fatal_action", doc.get("fatal_action", Action.DRAIN_REBOOT.value))
    if not action.drains:
        raise ConfigError(f"must be a draining action, got {action.value!r}", file=str(path), key="fatal_action")
    default = _sxid_entry(path, "default", None, _mapping(path, doc.get("default"), "default"), action, known=False)
    entries: dict[int, SxidInfo] = {}
    for key, body in _mapping(path, doc.get("sxids"), "sxids").items():
        body = _mapping(path, body, f"sxids.{key}")
        for code in parse_codes(key, path, "sxids"):
            if code in entries:
                raise ConfigError(f"SXid {code} listed twice", file=str(path), key=f"sxids.{key}")
            entries[code] = _sxid_entry(path, f"sxids.{key}", code, body, action)
    return _Catalog(default, entries)


def parse_codes(key: Any, path: Path | str = "", section: str = "") -> list[int]:
    """``13`` -> [13]; ``"39-41,70"`` -> [39, 40, 41, 70]."""
    if isinstance(key, int) and not isinstance(key, bool):
        return [key]
    codes: list[int] = []
    for part in str(key).split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ConfigError(f"bad code {part.strip()!r}: use N, N-M or a comma list", file=str(path),
                              key=f"{section}.{key}")
        lo = int(m.group(1))
        codes.extend(range(lo, int(m.group(2) or lo) + 1))
    return codes


def _xid_entry(path: Path | str, key: str, code: int | None, body: dict, known: bool = True) -> XidInfo:
    name, meaning = _text(path, key, body, "name"), _text(path, key, body, "meaning")
    severity = body.get("severity")
    if severity not in SEVERITIES:
        raise ConfigError(f"severity must be one of {', '.join(SEVERITIES)}, got {severity!r}", file=str(path),
                          key=f"{key}.severity")
    action = _action(path, f"{key}.action", body.get("action"))
    if severity == "fail" and not action.drains:
        raise ConfigError(f"a fail needs a draining action, got {action.value!r}", file=str(path), key=f"{key}.action")
    if severity == "warn" and action.drains:
        raise ConfigError(f"a warn must not drain, got {action.value!r}", file=str(path), key=f"{key}.action")
    drain_after = body.get("drain_after", 1)
    if not isinstance(drain_after, int) or isinstance(drain_after, bool) or drain_after < 1:
        raise ConfigError(f"drain_after must be a whole number >= 1, got {drain_after!r}", file=str(path),
                          key=f"{key}.drain_after")
    if drain_after > 1 and severity != "fail":
        raise ConfigError("drain_after counts to a drain: only a fail entry has one", file=str(path),
                          key=f"{key}.drain_after")
    return XidInfo(code, name, meaning, severity, action, bool(body.get("app", False)),
                   " ".join(str(body.get("note", "") or "").split()), known,
                   " ".join(str(body.get("differs", "") or "").split()), drain_after)


def _sxid_entry(path: Path | str, key: str, code: int | None, body: dict, action: Action,
                known: bool = True) -> SxidInfo:
    fatal = body.get("fatal")
    if not isinstance(fatal, bool):
        raise ConfigError(f"fatal must be true or false, got {fatal!r}", file=str(path), key=f"{key}.fatal")
    return SxidInfo(code, _text(path, key, body, "name"), _text(path, key, body, "meaning"), fatal, action, known)


def _action(path: Path | str, key: str, value: Any) -> Action:
    try:
        return Action(value)
    except ValueError:
        choices = ", ".join(a.value for a in Action)
        raise ConfigError(f"action must be one of {choices}, got {value!r}", file=str(path), key=key) from None


def _text(path: Path | str, key: str, body: dict, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string", file=str(path), key=f"{key}.{name}")
    return " ".join(value.split())


def _mapping(path: Path | str, value: Any, key: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"must be a mapping, got {type(value).__name__}", file=str(path), key=key)
    return value


def _read_yaml(path: Path | str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read catalog: {e.strerror or e}", file=str(path)) from e
    # Memoised between runs (gpuhc.files.parsecache): a node with an Xid in its log looks the catalog
    # up on every run, and parsing it costs more than the rest of a healthy run.
    from gpuhc.files.parsecache import cached

    doc = cached(str(path), text, "plain", lambda t: _parse(path, t))
    if not isinstance(doc, dict):
        raise ConfigError("catalog must be a YAML mapping", file=str(path))
    return doc


def _parse(path: Path | str, text: str) -> Any:
    import yaml

    from gpuhc.text.yamlpos import safe_loader

    try:
        return yaml.load(text, Loader=safe_loader())  # yaml.safe_load, with libyaml where built
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {getattr(e, 'problem', None) or e}", file=str(path), line=line) from e
