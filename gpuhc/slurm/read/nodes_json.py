"""Slurm's JSON node listings, every generation of them, into :class:`gpuhc.slurm.read.nodes.Node`.

Recognised by what the document holds, never by its version string (plugin names and
``meta`` layouts change between releases; fields change more slowly):

- ``sinfo --json`` 21.08/22.05 (OpenAPI v0.0.37/v0.0.38): ``{"nodes": [...]}``, each node with
  ``state`` a lower-case string, ``state_flags`` a list, ``reason_changed_at`` an epoch integer.
- ``scontrol show node --json`` (23.02+) and slurmrestd ``/nodes`` (23.11-25.11): the same
  ``{"nodes": [...]}`` but ``state`` is a list of upper-case words (base state and flags), and
  from 23.11 times are objects ``{"set": .., "infinite": .., "number": ..}``.
- ``sinfo --json`` 23.02+: ``{"sinfo": [...]}``, one entry per partition and state group, each
  naming its nodes (``nodes.nodes``) with one state and reason for all of them.
- a bare list of node objects (someone's ``jq .nodes`` output).

Unknown keys are ignored. A document Slurm itself marked as failed (non-empty ``errors``) is an
error, not an empty cluster: an empty report would tell the admin everything is fine.
"""

from __future__ import annotations

import functools
import gc
import json
from contextlib import contextmanager
from typing import Any, Iterator

try:  # 2-4x faster than json on Slurm's big node listings; same documents, same results
    import orjson as _orjson
except ImportError:  # optional: json gives the same answers, only slower
    _orjson = None

from gpuhc.slurm.read.nodes import MAX_NODES, Node, NodeParseError, parse_state
from gpuhc.slurm.read.releases import SINFO_JSON_NEW, SINFO_JSON_OLD, SINFO_REASON_USER_KEYS

# In a state list exactly one word is the base state (Slurm's node_state_base); all else are
# flags, DRAIN included, whatever order they come in.
_LIST_BASES = frozenset({"IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "END"})

MAX_DEPTH = 64  # Slurm's node JSON is under 10 levels deep
MAX_EPOCH = 253402300800  # 10000-01-01: the last second a date can be shown for

_SCONTROL = "scontrol/slurmrestd node JSON"


def parse_nodes_json(text: str | bytes) -> list[Node]:
    """Parse any Slurm JSON node listing; raise :class:`NodeParseError` saying where it broke."""
    with _no_gc():
        return nodes_from_document(loads(text))


def loads(text: str | bytes) -> Any:
    """Decode JSON with orjson when it is installed, else json; errors name line and column.

    orjson refuses a few things json takes (NaN, integers past 64 bits, lone surrogates): on
    any orjson error json gets the last word, so the two never disagree on what is valid.
    The nesting is bounded before either decoder sees the text: json recurses per level, and
    orjson 3.8 crashes the whole process (SIGSEGV) on a few thousand levels.
    """
    from gpuhc.files.untrusted import json_depth

    probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if json_depth(probe) > MAX_DEPTH:
        raise NodeParseError(f"Slurm node JSON: nested deeper than {MAX_DEPTH} levels: not a node listing")
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    try:
        try:
            return json.loads(text)
        except UnicodeDecodeError:  # bytes that are not UTF-8: keep what can be read
            return json.loads(text.decode("utf-8", "replace"))
    except json.JSONDecodeError as e:
        raise NodeParseError(f"Slurm node JSON: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:  # json recurses per nesting level; Slurm's own JSON is ~6 deep
        raise NodeParseError("Slurm node JSON: nested too deeply to be a node listing") from None


@contextmanager
def _no_gc() -> Iterator[None]:
    """Decoding 10,000 nodes allocates ~1M dicts, lists and strings, none of them garbage; the
    cyclic collector would walk the growing heap again and again (a third of the time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def nodes_from_document(doc: Any) -> list[Node]:
    """The already-decoded document (slurmrestd clients hand us a dict)."""
    if isinstance(doc, list):
        return _nodes(doc, "[{}]")
    if not isinstance(doc, dict):
        raise NodeParseError(f"Slurm node JSON: expected an object with `nodes` or `sinfo`, got {type(doc).__name__}")
    _raise_on_slurm_errors(doc)
    if isinstance(doc.get("sinfo"), list):
        return _from_sinfo_groups(doc["sinfo"])
    nodes = doc.get("nodes")
    if nodes is None:
        keys = ", ".join(sorted(doc)[:8]) or "nothing"
        raise NodeParseError(f"Slurm node JSON: no `nodes` or `sinfo` list at the top level (found {keys})")
    if not isinstance(nodes, list):
        raise NodeParseError(f"Slurm node JSON: `nodes` must be a list, got {type(nodes).__name__}")
    return _nodes(nodes, "nodes[{}]")


def _nodes(items: list, where: str) -> list[Node]:
    """Each item through the fast path; one it cannot take goes through the careful one,
    which either builds the same Node or says exactly what is wrong and where."""
    out = []
    fast = _fast_node
    for i, item in enumerate(items):
        node = fast(item)
        if node is None:
            node = _node(item, where.format(i), _guess_kind(item))
        out.append(node)
    return out


def _fast_node(item: Any) -> Node | None:
    """The common shapes in as few steps as possible (10,000 nodes must render in < 1 s):
    validation of the repeated parts (state words, partition lists) is cached per distinct
    value, and anything unusual returns None for :func:`_node` to judge."""
    if type(item) is not dict:
        return None
    name = item.get("name")
    if type(name) is not str or not name:
        return None
    state = item.get("state")
    extra = item.get("state_flags")
    try:
        if type(state) is str:
            words = (state,)
        elif type(state) is list:
            words = tuple(state)
        else:
            return None
        if extra is not None:
            if type(extra) is list:
                words += tuple(extra)
            elif extra != "":
                return None
        parsed = _checked_words(words)
        parts = item.get("partitions")
        if parts is None:
            partitions: tuple[str, ...] | None = ()
        elif type(parts) is str or type(parts) is list:
            partitions = _checked_partitions(parts if type(parts) is str else tuple(parts))
        else:
            return None
    except TypeError:  # an unhashable item (a dict in a list): not a shape we know
        return None
    if parsed is None or partitions is None:
        return None
    reason = item.get("reason")
    user = when = None
    if reason is not None:
        if type(reason) is not str:
            return None
        reason = reason.strip() or None
        if reason is not None:
            user = item.get("reason_set_by_user")
            if user is not None:
                if type(user) is not str:
                    return None
                user = user.strip() or None
            when = item.get("reason_changed_at")
            if type(when) is dict:
                when = None if (not when.get("set", True) or when.get("infinite")) else when.get("number")
            if when is not None:
                if type(when) is not int and type(when) is not float:
                    return None
                when = float(when) if 0 < when < MAX_EPOCH else None
    return Node(name, parsed[0], parsed[1], reason, user, when, partitions, parsed[2])


@functools.lru_cache(maxsize=1024)
def _checked_words(words: tuple) -> tuple[str, frozenset[str], str] | None:
    if not all(type(w) is str for w in words):
        return None
    return _words_state(words)


@functools.lru_cache(maxsize=1024)
def _checked_partitions(value: str | tuple) -> tuple[str, ...] | None:
    if type(value) is str:
        return tuple(p for p in value.split(",") if p)
    if not all(type(p) is str for p in value):
        return None
    return value


def _raise_on_slurm_errors(doc: dict) -> None:
    errors = doc.get("errors")
    if not errors or not isinstance(errors, list):
        return
    texts = []
    for err in errors:
        if isinstance(err, dict):
            texts.append(str(err.get("description") or err.get("error") or err))
        else:
            texts.append(str(err))
    raise NodeParseError("Slurm reported errors in this JSON instead of nodes: " + "; ".join(texts))


def _guess_kind(item: Any) -> str:
    if isinstance(item, dict) and isinstance(item.get("state"), str):
        return SINFO_JSON_OLD
    return _SCONTROL


def _node(item: Any, where: str, kind: str) -> Node:
    if not isinstance(item, dict):
        raise NodeParseError(f"{kind}, {where}: expected a node object, got {type(item).__name__}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise NodeParseError(f"{kind}, {where}: node has no `name`")
    here = f"{kind}, {where} ({name})"
    state, flags, raw = _state(item.get("state"), item.get("state_flags"), here)
    reason = _text(item.get("reason"), here, "reason")
    return Node(
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        reason_user=_text(item.get("reason_set_by_user"), here, "reason_set_by_user") if reason else None,
        reason_time=_time(item.get("reason_changed_at"), here, "reason_changed_at") if reason else None,
        partitions=_partitions(item.get("partitions"), here),
        raw_state=raw,
    )


def _state(value: Any, extra_flags: Any, here: str) -> tuple[str, frozenset[str], str]:
    """State as a string (``idle``, ``down*``, maybe with ``+FLAGS``) plus ``state_flags``, or as
    a list of words where the base state may be anywhere (``["IDLE", "DRAIN"]``)."""
    extra = tuple(_string_list(extra_flags, here, "state_flags"))
    if isinstance(value, str):
        return _words_state((value,) + extra)
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return _words_state(tuple(value) + extra)
    if value is None:
        return "UNKNOWN", frozenset(), ""
    raise NodeParseError(f"{here}: `state` must be a string or a list of strings, got {value!r}")


@functools.lru_cache(maxsize=1024)
def _words_state(words: tuple[str, ...]) -> tuple[str, frozenset[str], str]:
    # Cached: 10,000 nodes share a few dozen state combinations.
    upper = [w.upper() for w in words]
    if not upper:
        return "UNKNOWN", frozenset(), ""
    # Put the base state first: Slurm lists it first today, but that is not promised. A single
    # string (sinfo's "idle", "drained*") is its own base whatever it says.
    first = next((i for i, w in enumerate(upper) if w.rstrip("*~#%!$@^-") in _LIST_BASES), 0)
    ordered = [upper[first]] + upper[:first] + upper[first + 1:]
    base, flags = parse_state("+".join(ordered))
    return base, flags, "+".join(upper)


def _string_list(value: Any, here: str, key: str) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise NodeParseError(f"{here}: `{key}` must be a list of strings, got {value!r}")


def _text(value: Any, here: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise NodeParseError(f"{here}: `{key}` must be a string, got {value!r}")
    value = value.strip()
    return value or None


def _time(value: Any, here: str, key: str) -> float | None:
    """Epoch int, or 23.11's ``{"set": true, "infinite": false, "number": N}``; 0 and unset are
    "no time"."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NodeParseError(f"{here}: `{key}` must be epoch seconds, got {value!r}")
    # Past the year 9999 no clock can print it: as good as no time (1e30 would overflow).
    return float(value) if 0 < value < MAX_EPOCH else None


def _partitions(value: Any, here: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p for p in value.split(",") if p)
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return tuple(value)
    raise NodeParseError(f"{here}: `partitions` must be a list of names, got {value!r}")


def _from_sinfo_groups(groups: list) -> list[Node]:
    """23.02+ ``sinfo --json``: entries per (partition, state, reason). A node in several
    partitions appears in several entries; merge them into one node with all its partitions."""
    by_name: dict[str, Node] = {}
    named = 0
    for i, group in enumerate(groups):
        where = f"{SINFO_JSON_NEW}, sinfo[{i}]"
        if not isinstance(group, dict):
            raise NodeParseError(f"{where}: expected an object, got {type(group).__name__}")
        names = _group_names(group.get("nodes"), where)
        named += len(names)
        if named > MAX_NODES:  # hostlists expand: a small file could name billions
            raise NodeParseError(f"{where}: more than {MAX_NODES:,} node names in one listing")
        node_info = group.get("node") if isinstance(group.get("node"), dict) else {}
        state, flags, raw = _state(node_info.get("state"), None, where)
        reason_obj = group.get("reason") if isinstance(group.get("reason"), dict) else {}
        reason = _text(reason_obj.get("description"), where, "reason.description")
        # where the release keeps the reason's user (gpuhc/slurm/read/releases.py)
        in_reason, beside = SINFO_REASON_USER_KEYS
        user_raw = reason_obj.get(in_reason) or group.get(beside)
        user = _text(user_raw, where, "reason.user") if reason else None
        when = _time(reason_obj.get("time"), where, "reason.time") if reason else None
        part = group.get("partition") if isinstance(group.get("partition"), dict) else {}
        pname = part.get("name") if isinstance(part.get("name"), str) else None
        # 23.02+ groups nodes that share a state into one record with one reason: with several
        # nodes, the others' reasons are lost in the file itself (docs/slurm.md, drain-report).
        doubt = (f"one reason for the {len(names)} nodes of one sinfo --json record, it may be only one "
                 "node's; `scontrol show node` has each node's own") if reason and len(names) > 1 else ""
        for name in names:
            old = by_name.get(name)
            parts = (old.partitions if old else ()) + ((pname,) if pname and (not old or pname not in old.partitions) else ())
            if old is not None and doubt and not old.reason_doubt:
                # A record of this node alone already gave its own reason: keep that one.
                by_name[name] = Node(name, state, flags, old.reason, old.reason_user, old.reason_time, parts, raw)
            else:
                by_name[name] = Node(name, state, flags, reason, user, when, parts, raw, doubt)
    return list(by_name.values())


def _group_names(value: Any, where: str) -> list[str]:
    """``nodes: {"nodes": ["n1", ...]}`` (names may be hostlist expressions)."""
    if isinstance(value, dict):
        value = value.get("nodes")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise NodeParseError(f"{where}: `nodes.nodes` must be a list of node names, got {value!r}"[:300])
    out: list[str] = []
    for item in value:
        if "[" in item:
            import hostlist

            try:
                out.extend(hostlist.expand_hostlist(item))
            except hostlist.BadHostlist as e:
                raise NodeParseError(f"{where}: bad hostlist {item!r}: {e}") from None
        else:
            out.append(item)
    return out
