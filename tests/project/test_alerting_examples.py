"""The shipped alerting and hook examples work against the real things: Prometheus' own promtool
checks and unit-tests the rules, the dashboard and rules name only metrics gpuhc writes, and
the webhook hook posts to a real HTTP server when gpuhc fires it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from gpuhc.export.prometheus import HELP
from gpuhc.export.hooks import fire
from tests.helpers.paths import REPO
from tests.helpers.trusted import trusted_copy

EXAMPLES = REPO / "examples"
RULES = EXAMPLES / "alerting" / "gpuhc-rules.yml"
DASHBOARD = EXAMPLES / "alerting" / "grafana-dashboard.json"
HOOK = EXAMPLES / "hooks" / "slack-webhook.py"
METRIC = re.compile(r"\bgpuhc_[a-z_]+\b")


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool not found: install Debian's prometheus package (tests/run.sh does)"
    return found


def test_promtool_accepts_the_rules():
    cp = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS: 11 rules found" in cp.stdout + cp.stderr


def test_promtool_unit_tests_of_the_rules_pass():
    cp = subprocess.run([_promtool(), "test", "rules", "gpuhc-rules.test.yml"], capture_output=True, text=True,
                        timeout=60, cwd=RULES.parent)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def _exprs() -> list[str]:
    rules = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return rules + [t["expr"] for p in panels for t in p["targets"]]


def test_rules_and_dashboard_name_only_metrics_gpuhc_writes():
    used = {m for e in _exprs() for m in METRIC.findall(e)}
    assert used and used <= set(HELP), used - set(HELP)
    # and they cover the node, check and breaker families
    assert {"gpuhc_node_healthy", "gpuhc_check_status", "gpuhc_breaker_open", "gpuhc_breaker_retired_alert"} <= used


def test_dashboard_is_importable_json():
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and doc["uid"] and doc["templating"]["list"][0]["type"] == "datasource"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in doc["panels"])


class _Webhook(BaseHTTPRequestHandler):
    posts: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(tmp_path):
    _Webhook.posts, _Webhook.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), _Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url_file = tmp_path / "webhook.url"
    url_file.write_text(f"http://127.0.0.1:{server.server_port}/hooks/T000/B000\n")
    url_file.chmod(0o600)
    yield url_file
    server.shutdown()


@pytest.fixture
def hook(tmp_path):
    """The shipped hook as root installs it: gpuhc refuses, as root, a hook others could write,
    whatever the checkout's modes (tests/helpers/trusted.py)."""
    return trusted_copy(HOOK, tmp_path / HOOK.name)


class Lines(list):
    def __call__(self, text, loud=False):
        self.append(text)


def test_webhook_hook_posts_the_event(webhook, hook):
    log = Lines()
    settings = {"commands": [[str(hook), "--url-file", str(webhook)]], "timeout_s": 20.0}
    fire("drain", {"node": "gpu017", "reason": "gpuhc: xid79 gpu3",
                   "breaker": {"drained": 2, "total": 64, "cap": 7, "scope": "partition gpu"}}, settings, log)
    assert "ok" in log[0], log
    ((ctype, body),) = _Webhook.posts
    assert ctype == "application/json"
    assert body["text"].splitlines() == [":warning: gpuhc drain on gpu017: gpuhc: xid79 gpu3",
                                         "circuit breaker: 2/64 held by gpuhc, cap 7 (partition gpu)"]


def test_webhook_hook_failure_is_logged(webhook, hook):
    _Webhook.status = 500
    log = Lines()
    fire("resume", {"node": "gpu017"}, {"commands": [[str(hook), "--url-file", str(webhook)]], "timeout_s": 20.0}, log)
    assert "exited 1" in log[0] and "HTTP Error 500" in log[0], log
