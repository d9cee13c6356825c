#!/usr/bin/env bash
# Toolmark Gateway across nodes: one redis-server (persistence off) and two gateway nodes on
# this machine. Pages connect to node 1, the agent calls through node 2, so every call crosses
# nodes through Redis.
#   1. RATE calls/s (default 1000) for DURATION s: round-trip percentiles, and Redis commands per
#      call read from INFO commandstats (reset right before the first call).
#   2. A rate sweep (SWEEP, default "1000 2000 3000 4000 5000 6000", SWEEP_SECS each) up to the
#      first rate whose p99 passes 20 ms.
# Environment as for run.sh, plus REDIS_SERVER (redis-server), REDIS_CLI (redis-cli).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rate="${RATE:-1000}"
duration="${DURATION:-20}"
call_pages="${CALL_PAGES:-1000}"
sweep="${SWEEP:-1000 2000 3000 4000 5000 6000}"
sweep_secs="${SWEEP_SECS:-10}"
source_addrs="${SOURCE_ADDRS:-16}"
cargo="${CARGO:-cargo}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
gateway_bin="$target_dir/release/toolmark-gateway"
loadgen_bin="$target_dir/release/toolmark-loadgen"
redis_server="${REDIS_SERVER:-redis-server}"
redis_cli="${REDIS_CLI:-redis-cli}"
origin="http://loadgen.test"

command -v "$redis_server" >/dev/null || { echo "run-redis.sh: redis-server missing (apt-get install -y redis-server)" >&2; exit 1; }
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$root" && "$cargo" build --release --locked -p toolmark-gateway -p toolmark-loadgen)
fi

work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

redis_port="$(free_port)"
"$redis_server" --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do "$redis_cli" -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

api_key="tmk_bench_$(random_hex 24)"
token_secret="$(random_hex 32)"
key_hash="$(printf %s "$api_key" | sha256sum | cut -d' ' -f1)"
cat >"$work/gateway.toml" <<TOML
[broker]
kind = "redis"
url = "redis://127.0.0.1:$redis_port"

[[tenants]]
id = "bench"
api_keys = ["sha256:$key_hash"]
token_secret = "$token_secret"
allowed_origins = ["$origin"]

[tenants.limits]
max_connections = 200000
calls_per_second = 100000
page_messages_per_second = 10000
TOML

start_node() {
    local log="$work/node-$1.log" line=""
    RUST_LOG="${GATEWAY_LOG:-info}" "$gateway_bin" --config "$work/gateway.toml" --listen 127.0.0.1:0 --node-id "node-$1" >"$log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        line="$(grep -m1 -o 'listening on http://[0-9.:]*' "$log" || true)"
        [[ -n "$line" ]] && break
        sleep 0.1
    done
    [[ -n "$line" ]] || { cat "$log" >&2; exit 1; }
    node_url="${line#listening on }"
}
# Not in a subshell: the node's pid must reach the cleanup list.
start_node 1
node1="$node_url"
start_node 2
node2="$node_url"
echo "run-redis.sh: redis on $redis_port, node 1 $node1 (pages), node 2 $node2 (agent)" >&2

calls() {
    TOOLMARK_BENCH_TOKEN_SECRET="$token_secret" TOOLMARK_BENCH_API_KEY="$api_key" \
        "$loadgen_bin" calls --url "$node1" --agent-url "$node2" --tenant bench --origin "$origin" \
        --source-addrs "$source_addrs" --pages "$call_pages" "$@"
}

echo "== cross-node calls: $rate/s for $duration s" >&2
calls --rate "$rate" --duration-secs "$duration" --pause-before-secs 2 2>"$work/calls.err" >"$work/calls.out" &
lg=$!
until grep -q "pausing" "$work/calls.err" 2>/dev/null; do
    kill -0 "$lg" 2>/dev/null || { cat "$work/calls.err" >&2; exit 1; }
    sleep 0.1
done
"$redis_cli" -p "$redis_port" config resetstat >/dev/null
wait "$lg"
cat "$work/calls.err" >&2
cross="$(head -1 "$work/calls.out")"
cat "$work/calls.out" | tail -n +2 >&2
sent="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sent"])' "$cross")"
"$redis_cli" -p "$redis_port" info commandstats >"$work/stats.txt"
per_call="$(python3 - "$sent" "$work/stats.txt" <<'PY'
import re, sys, json
sent = int(sys.argv[1])
out = {}
for line in open(sys.argv[2]):
    m = re.match(r"cmdstat_([a-z|]+):calls=(\d+)", line.strip())
    if m:
        out[m.group(1)] = round(int(m.group(2)) / sent, 3)
print(json.dumps({"commands_per_call": out, "total_per_call": round(sum(out.values()), 3)}, sort_keys=True))
PY
)"

echo "== sweep: $sweep (each $sweep_secs s) until p99 > 20 ms" >&2
sweep_results=()
for r in $sweep; do
    res="$(calls --rate "$r" --duration-secs "$sweep_secs" 2>"$work/sweep-$r.err" | head -1)" || true
    if [[ -z "$res" ]]; then
        echo "rate $r/s: the run failed (calls lost or refused):" >&2
        tail -3 "$work/sweep-$r.err" >&2
        break
    fi
    sweep_results+=("$res")
    p99="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["p99_us"])' "$res")"
    errors="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["errors"])' "$res")"
    echo "rate $r/s: p99 ${p99} µs, ${errors} errors" >&2
    [[ "$p99" -gt 20000 || "$errors" -gt 0 ]] && break
done

echo "== results"
echo "$cross"
echo "$per_call"
printf '%s\n' "${sweep_results[@]}"
