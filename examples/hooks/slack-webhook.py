#!/usr/bin/env python3
"""gpuhc hook: post each event to a Slack-style incoming webhook (stdlib only).

gpuhc runs this with the event as JSON on stdin (docs/repair.md, "Hooks"). Configure it as

    hooks:
      commands: [[/usr/local/sbin/gpuhc-slack-webhook, --url-file, /etc/gpuhc/slack-webhook.url]]

The webhook URL is a secret: it is read from a file (root's, mode 0600), never taken on the
command line, where every user could read it in `ps`. Anything that accepts
``{"text": "..."}`` works (Slack, Mattermost, Rocket.Chat, Teams' workflow webhooks).
Exit 0 when the webhook took the message, 1 when it did not (gpuhc logs it; verdicts stand).
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

ICONS = {"drain": ":warning:", "resume": ":white_check_mark:", "retire": ":no_entry:",
         "breaker_trip": ":rotating_light:", "remediation": ":wrench:"}


def message(event: dict) -> str:
    kind = str(event.get("event", "?"))
    node = event.get("node") or event.get("host") or "?"
    head = f"{ICONS.get(kind, '')} gpuhc {kind} on {node}".strip()
    detail = event.get("reason") or event.get("message") or event.get("why") or ""
    lines = [head + (f": {detail}" if detail else "")]
    breaker = event.get("breaker")
    if isinstance(breaker, dict) and breaker.get("cap") is not None:
        lines.append(f"circuit breaker: {breaker.get('drained')}/{breaker.get('total')} held by gpuhc, "
                     f"cap {breaker.get('cap')} ({breaker.get('scope')})")
    if kind == "remediation" and event.get("step"):
        lines.append(f"step: {event['step']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url-file", required=True, help="file holding the webhook URL (one line)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds for the HTTP request")
    args = ap.parse_args()
    try:
        with open(args.url_file, encoding="utf-8") as f:
            url = f.read().strip()
        event = json.load(sys.stdin)
    except (OSError, ValueError) as e:
        print(f"gpuhc-slack-webhook: {e}", file=sys.stderr)
        return 1
    if not url.startswith(("https://", "http://")):
        print(f"gpuhc-slack-webhook: {args.url_file} does not hold an http(s) URL", file=sys.stderr)
        return 1
    body = json.dumps({"text": message(event)}).encode("utf-8")
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            resp.read(4096)
    except (urllib.error.URLError, OSError) as e:
        print(f"gpuhc-slack-webhook: POST failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
