"""The Slurm hooks' config: the one in place, else the last one that loaded, else the defaults.

A typo pushed to every node (a bad key, a dangling ``sources.test_scenario`` link) must not turn
checking off across the fleet, quietly. So every hook run that loads the config in place keeps a
copy of it in the state directory (``config.last-good.yaml``, rewritten only when it changed);
a run whose config does not load judges the node on that copy, or on the built-in defaults when
there is none, and says so loudly: a syslog line, the event log's ``config_error``, the metric
``gpuhc_config_error`` (docs/slurm.md, "A broken config"). Never a drain because of gpuhc's own
error: the error itself judges nothing.

``gpuhc check`` and ``gpuhc config validate`` do not come here: an admin at a prompt gets exit 2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

LAST_GOOD = "config.last-good.yaml"
FILE_MODE = 0o600  # the config may name hook commands and paths: root's to read


@dataclass(frozen=True)
class ConfigProblem:
    """Why the config in place was not used, and what the run used instead."""

    error: str  # the loader's message, first line (file:line: key: what)
    file: str | None
    line: int | None
    using: str  # "last good copy <path>" or "built-in defaults"

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error, "file": self.file, "line": self.line, "using": self.using}

    def sentence(self) -> str:
        return f"config does not load ({self.error}): judging on the {self.using}"


def last_good_path(state_dir: str) -> str:
    return os.path.join(state_dir, LAST_GOOD)


def remember(config, state_dir: str) -> str | None:
    """Keep the config file that just loaded as the last good one; None, or why not (a note)."""
    if not config.path:
        return None
    from gpuhc.files.fsutil import write_atomic
    from gpuhc.text.yamlpos import read_text

    target = last_good_path(state_dir)
    try:
        text = read_text(config.path)
        try:
            if read_text(target, follow_links=False) == text:
                return None
        except (OSError, ValueError):
            pass  # none yet, or unreadable: write it
        if not os.path.isdir(state_dir):
            return None  # a state directory not made yet: the run itself says so
        write_atomic(target, text.encode("utf-8"), FILE_MODE, "last good config")
    except (OSError, ValueError) as e:
        return f"last good config not kept in {target}: {e}"
    return None


def state_dir_hint(src_state_dir: str | None, config_path: str) -> str:
    """The state directory of a run whose config does not load: --state-dir, $GPUHC_STATE_DIR,
    the broken file's own ``state_dir`` when its YAML still parses, else the default."""
    from gpuhc.state.node import default_state_dir

    if src_state_dir:
        return src_state_dir
    configured = None
    try:
        from gpuhc.text.yamlpos import load_file_text, read_text

        raw, _ = load_file_text(read_text(config_path), config_path)
        value = raw.get("state_dir") if isinstance(raw, dict) else None
        configured = value if isinstance(value, str) and os.path.isabs(value) else None
    except Exception:  # a file that does not parse says nothing about where state lives
        configured = None
    return default_state_dir(configured)


def stand_in(config_path: str | None, state_dir: str | None, hostname: str | None, error,
             copy_first: bool = True):
    """(config, ConfigProblem) a run uses instead of the one that raised ``error``: the last good
    copy in the state directory (unless ``copy_first`` is false: the copy failed too), else the
    built-in defaults in observe mode."""
    from gpuhc.config.load import Config, default_path, load_config, schema
    from gpuhc.errors import ConfigError
    from gpuhc.text.schema import defaults

    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    copy = last_good_path(state_dir_hint(state_dir, config_path or default_path()))
    if copy_first and os.path.lexists(copy):
        try:
            return load_config(copy, hostname), ConfigProblem(message, error.file, error.line, f"last good copy {copy}")
        except ConfigError:
            pass  # the copy does not load either (another version's keys): the defaults
    # The defaults' mode is enforce, but which mode this site chose is in the file that did not
    # load: a run that cannot tell acts no more than observe mode would (it judges, logs, records).
    data = defaults(schema())
    data["slurm"]["mode"] = "observe"
    return Config(data, None, hostname), ConfigProblem(message, error.file, error.line,
                                                       "built-in defaults (observe mode)")


def fallback_options(src, hostname: str, error, build):
    """RunOptions for a hook on ``hostname`` whose config raised ``error`` (a ConfigError):
    ``build(src, config)`` makes them from a config, as a normal run does; the copy's own sources
    may fail as well (a scenario it names is gone), and then the defaults serve."""
    from gpuhc.errors import ConfigError

    state_dir = state_dir_hint(src.state_dir, src.config_path or _default_path())
    config, problem = stand_in(src.config_path, src.state_dir, hostname, error)
    if config.path is not None:
        try:
            return replace(build(src, config), config_problem=problem)
        except ConfigError:
            config, problem = stand_in(src.config_path, src.state_dir, hostname, error, copy_first=False)
    return replace(build(replace(src, state_dir=src.state_dir or state_dir), config), config_problem=problem)


def _default_path() -> str:
    from gpuhc.config.load import default_path

    return default_path()
