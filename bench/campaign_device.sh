#!/usr/bin/env bash
# The campaign's month a seed on a lent machine's CPUs: one seed per core at once, each a fresh
# process with its own records file, cut at LIMIT seconds (a device call lasts at most 600 s; a
# seed cut there leaves no line, and its log says so: run it again, never leave it out; TOTAL
# seconds bound the whole call, and a seed with less than MIN_LEFT of it left is not started). The
# machine lacks gpuhc's pure-Python dependencies: put their wheels in .whl/ (git-ignored; the
# versions of tests/constraints.txt) and carry it. Results: $OUT/records-POLICY.jsonl (every
# finished seed's line, as bench/campaign.py --records writes it) and $OUT/logs.tgz.
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
END=$(( $(date +%s) + ${TOTAL:-575} ))
one() {  # one seed ("13", or "ladder:13" for another policy than POLICY): its records line, its log
    local left=$(( END - $(date +%s) )) limit=${LIMIT:-570} policy=${POLICY:-shipped} seed=$1
    case $1 in *:*) policy=${1%%:*}; seed=${1#*:};; esac
    if [ "$left" -lt "${MIN_LEFT:-150}" ]; then echo "$policy $seed: not started, ${left}s left" | tee -a "$W/rcs.txt"; return; fi
    [ "$left" -lt "$limit" ] && limit=$left
    timeout -k 5 "$limit" $PY bench/campaign.py --policy "$policy" --seeds "$seed-$seed" --days "${DAYS:-30}" \
        --nodes "${NODES:-64}" ${EXTRA:-} --records "$W/$policy-$seed.jsonl" --json "$W/$policy-$seed.json" > "$W/log-$policy-$seed.txt" 2>&1
    echo "$policy $seed: rc=$? $(date -u +%T)" | tee -a "$W/rcs.txt"
}
export -f one; export PY W LIMIT POLICY DAYS NODES EXTRA END MIN_LEFT
printf '%s\n' $SEEDS | xargs -P "${JOBS:-$(nproc)}" -I{} bash -c 'one {}'
for p in $(ls "$W" | sed -n 's/^\([a-z]*\)-[0-9]*\.jsonl$/\1/p' | sort -u); do
    cat "$W/$p"-*.jsonl > "$OUT/records-$p.jsonl"; echo "$p: $(wc -l < "$OUT/records-$p.jsonl") seeds finished"
done
tar -C "$W" -czf "$OUT/logs.tgz" .
echo "$(date -u) of $(echo $SEEDS | wc -w) asked"
