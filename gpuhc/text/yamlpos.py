"""Load YAML while remembering the line of every key, so errors can say file:line: key.

PyYAML's safe loader throws positions away once it builds Python objects. We compose the node
tree ourselves, build plain dicts/lists/scalars from it, and keep a side table mapping each key
path (a tuple) to its 1-based line. Duplicate keys are an error here: silently keeping the last
one hides typos in configs that decide whether a node gets drained.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuhc.errors import ConfigError

if TYPE_CHECKING:
    import yaml

Path = tuple  # of str | int

# Hostile or broken input limits. libyaml composes nested collections by C recursion and
# overflows the C stack (a segfault, not an exception) somewhere past ~20 000 levels, which
# takes ~40 KB of "[[[[" or "- - - -"; texts that large have their depth counted first, on the
# flat event stream. Our own builder recurses in Python (a RecursionError, caught). Aliases can
# expand a small file exponentially ("billion laughs"): the number of built values is capped.
_SCAN_DEPTH_ABOVE = 16 * 1024  # bytes; every file on the health-check path is smaller
_MAX_DEPTH = 100
_MAX_VALUES = 1_000_000


MAX_FILE_BYTES = 64 << 20  # configs, scenarios, snapshots, baselines: far smaller in practice


def read_text(path: str, limit: int = MAX_FILE_BYTES, follow_links: bool = True) -> str:
    """A YAML file's text, refusing more than ``limit`` bytes (``--config /dev/zero`` must not
    fill the node's memory) and anything but a regular file (a FIFO would block the run
    forever). ``follow_links=False`` for a file anyone may have handed over (a scenario attached
    to a ticket): a link there is refused, not followed. Raises OSError, UnicodeDecodeError or
    ValueError (too large, not a regular file, a link)."""
    import errno
    import os
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_links:
            raise ValueError("is a symbolic link; not following it") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), encoding="utf-8") as f:
            text = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(text) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB")
    return text


@lru_cache(maxsize=None)
def _yaml():
    """PyYAML, imported on the first parse (a run whose files are all in gpuhc.files.parsecache's memo
    never imports it), with one shared constructor and libyaml's loader where built."""
    import yaml

    # One constructor turns scalar nodes into Python values with YAML 1.1 safe rules (ints,
    # floats, booleans, null); it holds no per-document state we rely on, so it is shared. It
    # does remember every node it built (PyYAML clears that only in its own document loop):
    # load_with_lines clears it after each document, or a long-lived process (the watcher, a
    # campaign) keeps every parse's nodes.
    # libyaml's parser keeps node marks too and is ~10x faster than PyYAML's own.
    return yaml, yaml.constructor.SafeConstructor(), getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_loader():
    """The fastest safe loader at hand (libyaml's where built), for a parse without lines."""
    return _yaml()[2]


def load_file_text(text: str, path: str) -> tuple[Any, dict[Path, int]]:
    """:func:`load_with_lines` of the text just read from ``path``, memoised between runs by
    gpuhc.files.parsecache (the same value, parsed again whenever the text or the parser changed)."""
    from gpuhc.files.parsecache import cached

    return cached(path, text, "lines", lambda t: load_with_lines(t, path))


def _tab_indented(text: str, upto: int | None) -> int | None:
    """The first line up to ``upto`` (the parser's error line, which may be the one after)
    whose indentation holds a tab: the usual cause of a YAML error in a hand-edited file, named
    at its own line, in words."""
    for number, line in enumerate(text.splitlines()[:upto or None], 1):
        indent = line[:len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip():
            return number
    return None


def load_with_lines(text: str, filename: str) -> tuple[Any, dict[Path, int]]:
    yaml, _, loader = _yaml()
    try:
        if len(text) > _SCAN_DEPTH_ABOVE:
            _check_depth(text, filename)
        node = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as e:
        _check_depth(text, filename)  # our own limit and wording, whatever the library's are
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        tab = _tab_indented(text, line)
        if tab is not None:
            raise ConfigError("indented with a tab: YAML indents with spaces only", filename, tab) from None
        raise ConfigError(f"not valid YAML: {e.problem or e}", filename, line) from None
    except yaml.YAMLError as e:
        _check_depth(text, filename)
        raise ConfigError(f"not valid YAML: {e}", filename) from None
    except RecursionError:
        _check_depth(text, filename)
        raise ConfigError(f"nested more than {_MAX_DEPTH} levels deep", filename) from None
    lines: dict[Path, int] = {}
    if node is None:
        return None, lines
    try:
        return _build(node, (), lines, filename, [_MAX_VALUES]), lines
    except RecursionError:
        _check_depth(text, filename)
        raise ConfigError(f"nested more than {_MAX_DEPTH} levels deep", filename) from None
    finally:
        constructor = _yaml()[1]
        constructor.constructed_objects.clear()
        constructor.recursive_objects.clear()


def _check_depth(text: str, filename: str) -> None:
    """Raise our own error if ``text`` nests deeper than _MAX_DEPTH. Libraries differ on their
    own limits (PyYAML 6.0.4's scanner stops near 1,000 levels with its own words), so the
    depth is counted on the event stream, which reaches our limit long before theirs; any
    other library error found on the way is left for the caller to report."""
    if _flow_depth(text) > _MAX_DEPTH:
        raise ConfigError(f"nested more than {_MAX_DEPTH} levels deep", filename, 1)
    yaml, _, loader = _yaml()
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > _MAX_DEPTH:
                    raise ConfigError(f"nested more than {_MAX_DEPTH} levels deep", filename,
                                      event.start_mark.line + 1)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return


def _flow_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting outside quoted strings: libyaml's scanner refuses a deep
    flow collection before emitting a single event, so this one is counted on the text."""
    import re
    from itertools import accumulate

    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'', "", text)
    brackets = re.sub(r"[^\[\]{}]+", "", unquoted)
    return max(accumulate(1 if ch in "[{" else -1 for ch in brackets), default=0)


def _build(node: yaml.Node, path: Path, lines: dict[Path, int], filename: str, budget: list[int]) -> Any:
    yaml = _yaml()[0]
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"more than {_MAX_VALUES} values (aliases expanding without end?)", filename,
                          node.start_mark.line + 1)
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":
                raise ConfigError("YAML merge keys (<<) are not supported", filename, knode.start_mark.line + 1)
            key = _scalar(knode, filename)
            if isinstance(key, (dict, list)) or key is None:
                raise ConfigError("mapping keys must be plain values", filename, knode.start_mark.line + 1)
            key = str(key) if not isinstance(key, (str, int)) else key
            if key in out:
                raise ConfigError("duplicate key", filename, knode.start_mark.line + 1, _dotted(path + (key,)))
            lines[path + (key,)] = knode.start_mark.line + 1
            out[key] = _build(vnode, path + (key,), lines, filename, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, path + (i,), lines, filename, budget) for i, v in enumerate(node.value)]
    return _scalar(node, filename)


_STR = "tag:yaml.org,2002:str"


def _scalar(node: yaml.Node, filename: str) -> Any:
    yaml, constructor, _ = _yaml()
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError("expected a plain value", filename, node.start_mark.line + 1)
    if node.tag == _STR:  # what the constructor returns for a string, without its bookkeeping
        return node.value  # (most of a recording's values: its kernel log lines)
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise ConfigError(f"bad value: {e}", filename, node.start_mark.line + 1) from None


def _dotted(path: Path) -> str:
    return ".".join(str(p) for p in path)


def line_of(lines: dict[Path, int], path: Path) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())
