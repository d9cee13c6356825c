#!/usr/bin/env bash
# `make soak`: two gateway nodes on one redis-server at the real TTLs and grace periods, for
# SOAK_MINUTES (default 15) of calls, with pages that stay quiet, move between the nodes and
# confirm late (load-tests/loadgen/src/soak.rs). Reports the faults it counts (goal: 0 each) and
# the gateways' RSS and Redis used_memory from the end of the warm-up (WARMUP_SECS, default 600:
# one conversation TTL, twice the finished-call retention) to the end of the calls (goal: flat
# within 5%). SOAK_SAMPLES=FILE keeps the 30 s samples (seconds, RSS KiB of each node, Redis
# used_memory, Redis keys). Redis stalls (SIGSTOP) for SOAK_STALL_SECS (default 5) every
# SOAK_STALL_EVERY seconds (default 120; 0: never) while the calls run; the report adds the
# stalls, the 503s they caused, and the page frames the nodes held and dropped (goal: 0
# dropped). Not part of `make test`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/load-tests/lib.sh"
minutes="${SOAK_MINUTES:-15}"
pages="${SOAK_PAGES:-400}"
warmup="${WARMUP_SECS:-600}"
stall_every="${SOAK_STALL_EVERY:-120}"
stall_secs="${SOAK_STALL_SECS:-5}"
redis_cli="${REDIS_CLI:-redis-cli}"

lt_init
lt_raise_nofile
lt_build
lt_start_redis
lt_write_config redis
GATEWAY_LOG="${GATEWAY_LOG:-info}" lt_start_node 1
node1="$lt_node_url"; pid1="$lt_node_pid"
GATEWAY_LOG="${GATEWAY_LOG:-info}" lt_start_node 2
node2="$lt_node_url"; pid2="$lt_node_pid"
echo "soak: redis on $lt_redis_port, nodes $node1 and $node2, $pages pages, $minutes min" >&2

samples="$lt_work/samples"
(
    start=$(date +%s)
    while sleep 30; do
        t=$(( $(date +%s) - start ))
        r1=$(awk '/VmRSS/ {print $2}' "/proc/$pid1/status" 2>/dev/null || echo 0)
        r2=$(awk '/VmRSS/ {print $2}' "/proc/$pid2/status" 2>/dev/null || echo 0)
        used=$("$redis_cli" -p "$lt_redis_port" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r')
        keys=$("$redis_cli" -p "$lt_redis_port" dbsize | tr -d '\r')
        echo "$t $r1 $r2 $used $keys" >>"$samples"
    done
) &
sampler=$!
lt_pids+=("$sampler")

stall=()
if [ "$stall_every" -gt 0 ]; then
    stall=(--stall-redis-pid "$lt_redis_pid" --stall-every-secs "$stall_every" --stall-secs "$stall_secs")
fi
status=0
TOOLMARK_BENCH_TOKEN_SECRET="$lt_token_secret" TOOLMARK_BENCH_API_KEY="$lt_api_key" \
    "$lt_loadgen_bin" soak --url "$node1" --other "$node2" --tenant bench --origin "$lt_origin" \
    --pages "$pages" --minutes "$minutes" "${stall[@]}" >"$lt_work/soak.out" 2>"$lt_work/soak.err" || status=$?
kill "$sampler" 2>/dev/null || true
kill -CONT "$lt_redis_pid" 2>/dev/null || true
# Page frames the nodes held while Redis stalled, and dropped (goal 0).
frames="$lt_work/frames"
for url in "$node1" "$node2"; do
    curl -fsS "$url/metrics" | awk '/^toolmark_frames_(held_total|dropped_total)/ {print $1, $2}'
done >"$frames" || true
cat "$lt_work/soak.err" >&2
grep -ci "error\|panic" "$lt_work/node-1.log" "$lt_work/node-2.log" >&2 || true
cp "$samples" "${SOAK_SAMPLES:-/dev/null}" 2>/dev/null || true
python3 - "$samples" "$warmup" "$(head -1 "$lt_work/soak.out")" "$minutes" "$frames" <<'PY'
import json, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
warm = int(sys.argv[2])
# From the end of the warm-up to the end of the calls (after it, the load stops and the
# confirmations still owed arrive: memory falls and says nothing of a steady state).
end = int(sys.argv[4]) * 60
after = [r for r in rows if warm <= r[0] <= end] or rows
first, last = after[0], after[-1]
def ratio(i):
    return round(last[i] / first[i], 4) if first[i] else None
out = json.loads(sys.argv[3]) if sys.argv[3] else {}
held = dropped = 0
for line in open(sys.argv[5]):
    name, value = line.split()
    if name.startswith("toolmark_frames_held_total"):
        held += float(value)
    elif name.startswith("toolmark_frames_dropped_total"):
        dropped += float(value)
out.update({"framesHeld": int(held), "framesDropped": int(dropped)})
out.update({
    "warmupSecs": warm,
    "rssKiB": {"node1": [first[1], last[1]], "node2": [first[2], last[2]]},
    "rssRatio": {"node1": ratio(1), "node2": ratio(2)},
    "redisUsedMemory": [first[3], last[3]], "redisUsedMemoryRatio": ratio(3),
    "redisKeys": [first[4], last[4]],
    "samples": len(rows),
    "window": [first[0], last[0]],
})
print(json.dumps(out))
flat = all(r is not None and r <= 1.05 for r in (ratio(1), ratio(2), ratio(3)))
print("soak: memory " + ("flat within 5%" if flat else "NOT flat within 5%"), file=sys.stderr)
print(f"soak: {out.get('stalls', 0)} Redis stalls, {int(held)} page frames held, {int(dropped)} dropped", file=sys.stderr)
if dropped:
    sys.exit(3)
PY
exit "$status"
