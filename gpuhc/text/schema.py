"""A tiny declarative schema for gpuhc.yaml.

Each subsystem declares its own config section next to its code (``gpuhc/slurm/settings.py``,
``gpuhc/sweep/settings.py``, ``gpuhc/active/settings.py``); :mod:`gpuhc.config.load` assembles them,
validates a file against them before anything runs, and fills in the defaults. Hand-written
rather than jsonschema because the errors must name file, line and key, and that needs the YAML
node positions, which a generic validator never sees.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gpuhc.model.record import FrozenRecord


@dataclass(frozen=True, eq=False, repr=False)
class Key(FrozenRecord):
    """One config key: its type, default, bounds and what it is for."""

    type: type | tuple[type, ...]  # int, float, str, bool, list, dict (free-form mapping)
    default: Any
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None
    item: type | None = None  # element type for lists
    nullable: bool = False
    pattern: str | None = None  # a regular expression a string value (or each string item) must match in full

    def check(self, value: Any) -> str | None:
        """Return why ``value`` is wrong, or None when it is fine."""
        if value is None:
            return None if self.nullable else "must not be empty"
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in types and isinstance(value, bool):
            return f"must be {_names(types)}, got a boolean"
        if not isinstance(value, types):
            return f"must be {_names(types)}, got {type(value).__name__} {value!r}"
        if isinstance(value, float) and not math.isfinite(value):
            # YAML's .nan and .inf: NaN compares false with every bound, so it would pass them
            # all and then judge nothing (a threshold) or wait forever (a timeout).
            return f"must be a finite number, got {value}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}, got {value!r}"
        if self.min is not None and isinstance(value, (int, float)) and value < self.min:
            return f"must be >= {self.min}, got {value}"
        if self.max is not None and isinstance(value, (int, float)) and value > self.max:
            return f"must be <= {self.max}, got {value}"
        if self.pattern is not None and isinstance(value, str) and not re.fullmatch(self.pattern, value):
            return f"must match {self.pattern}, got {value!r}"
        if self.item is not None and isinstance(value, list):
            for v in value:
                if not isinstance(v, self.item) or (self.item is not bool and isinstance(v, bool)):
                    return f"items must be {self.item.__name__}, got {v!r}"
                if isinstance(v, float) and not math.isfinite(v):
                    return f"items must be finite numbers, got {v}"
                if self.pattern is not None and isinstance(v, str) and not re.fullmatch(self.pattern, v):
                    return f"items must match {self.pattern}, got {v!r}"
        return None


def _names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list", dict: "a mapping"}
    return " or ".join(names.get(t, t.__name__) for t in types)


# A section is a mapping of key -> Key or a nested section (dict).
Section = dict


def defaults(section: Section) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in section.items():
        out[name] = defaults(spec) if isinstance(spec, dict) else _copy(spec.default)
    return out


def _copy(v: Any) -> Any:
    if isinstance(v, (list, dict)):
        import copy

        return copy.deepcopy(v)
    return v


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: later wins, nested mappings merge key by key, nothing shared.

    The one merge of layered settings: defaults <- file <- host override, and check defaults
    <- GPU profile <- config for thresholds."""
    import copy

    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def did_you_mean(word: Any, names) -> str:
    """``: did you mean 'resume_after'?`` for a name one slip away from a known one, else ''.

    One slip is one letter added, dropped or changed, or two neighbours swapped (``xdi`` for
    ``xid``: difflib's ratio is low on short names, so a swap is tested for first); else a name
    difflib finds close. Three letters at least, so that ``a`` does not suggest ``b``."""
    import difflib

    word, known = str(word), [str(n) for n in names]

    def one_slip(name: str) -> bool:
        if abs(len(name) - len(word)) > 1 or name == word or min(len(name), len(word)) < 3:
            return False
        i = next((k for k, (a, b) in enumerate(zip(word, name)) if a != b), min(len(word), len(name)))
        if len(word) != len(name):  # one letter added or dropped at i
            return word[i + 1:] == name[i:] if len(word) > len(name) else word[i:] == name[i + 1:]
        swapped = word[i + 1:i + 2] == name[i:i + 1] and word[i:i + 1] == name[i + 1:i + 2]
        return word[i + 1:] == name[i + 1:] or (swapped and word[i + 2:] == name[i + 2:])

    slips = [n for n in known if one_slip(n)]
    close = slips and sorted(slips, key=lambda n: -difflib.SequenceMatcher(None, word, n).ratio())[:1]
    close = close or difflib.get_close_matches(word, known, n=1, cutoff=0.75)
    return f": did you mean {close[0]!r}?" if close else ""
