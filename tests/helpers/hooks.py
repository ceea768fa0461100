"""A hook that records what it receives: the fixture the hook tests and the flow tests share."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def recorder(tmp_path):
    """A hook that appends each event it receives (stdin JSON plus GPUHC_EVENT) to a file."""
    out = tmp_path / "events.jsonl"
    hook = _script(tmp_path / "record", f"""
import json, os, sys
doc = json.load(sys.stdin)
doc["_env_event"] = os.environ.get("GPUHC_EVENT")
doc["_argv"] = sys.argv[1:]
with open({str(out)!r}, "a") as f:
    f.write(json.dumps(doc) + "\\n")
""")
    return hook, out


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
