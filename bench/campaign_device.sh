#!/usr/bin/env bash
# The campaign's month a seed on a lent machine's CPUs: one seed per core at once, each a fresh
# process with its own records file, cut at LIMIT seconds (a device call lasts at most 600 s; a
# seed cut there leaves no line, and its log says so: run it again, never leave it out). The
# machine lacks gpuhc's pure-Python dependencies: put their wheels in .whl/ (git-ignored; the
# versions of tests/constraints.txt) and carry it. Results: $OUT/records.jsonl (every finished
# seed's line, as bench/campaign.py --records writes it) and $OUT/logs.tgz.
#   SEEDS="101 102 103" POLICY=shipped bash bench/campaign_device.sh
# Here, to try the script: PY=.venv/bin/python SKIP_INSTALL=1 OUT=/tmp/cd SEEDS=1 DAYS=1 NODES=4 bash bench/campaign_device.sh
set -u
PY=${PY:-python3}
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
W=/tmp/campaign-device; rm -rf "$W"; mkdir -p "$W" "$OUT"
echo "$(date -u) $(nproc) cores; $($PY -V); seeds: ${SEEDS:?name the seeds}"
one() {  # one seed: its records line, its log
    timeout -k 5 "${LIMIT:-570}" $PY bench/campaign.py --policy "${POLICY:-shipped}" --seeds "$1-$1" --days "${DAYS:-30}" \
        --nodes "${NODES:-64}" ${EXTRA:-} --records "$W/m-$1.jsonl" --json "$W/m-$1.json" > "$W/log-$1.txt" 2>&1
    echo "seed $1: rc=$? $(date -u +%T)" | tee -a "$W/rcs.txt"
}
export -f one; export PY W LIMIT POLICY DAYS NODES EXTRA
printf '%s\n' $SEEDS | xargs -P "${JOBS:-$(nproc)}" -I{} bash -c 'one {}'
cat "$W"/m-*.jsonl > "$OUT/records.jsonl" 2>/dev/null
tar -C "$W" -czf "$OUT/logs.tgz" .
echo "$(date -u) $(wc -l < "$OUT/records.jsonl") of $(echo $SEEDS | wc -w) seeds finished"
