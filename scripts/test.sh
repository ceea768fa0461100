#!/usr/bin/env bash
# Install gpuhc with its test extras and run the whole suite. README.md and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
exec python3 -m pytest -q "$@"
