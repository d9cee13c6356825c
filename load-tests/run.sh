#!/usr/bin/env bash
# Toolmark Gateway load run on this machine: builds the release gateway and load generator,
# then runs two scenarios, each against a fresh gateway (memory broker, tenant "bench"):
#   1. idle:  PAGES idle authenticated pages -> the gateway's RSS per page
#   2. calls: 1,000 pages, RATE calls/s for DURATION s -> call round-trip percentiles
# Both processes share the machine's cores; see load-tests/README.md for what the figures mean.
#
# Environment: PAGES (10000), RATE (2000), DURATION (20), CALL_PAGES (1000), RAMP (2000 page
# connections/s), HOLD (0 s of holding the idle pages after the measurement), SOURCE_ADDRS (16),
# CARGO (cargo), CARGO_TARGET_DIR (target), SKIP_BUILD (set to use binaries already built).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pages="${PAGES:-10000}"
rate="${RATE:-2000}"
duration="${DURATION:-20}"
call_pages="${CALL_PAGES:-1000}"
ramp="${RAMP:-2000}"
hold="${HOLD:-0}"
source_addrs="${SOURCE_ADDRS:-16}"
cargo="${CARGO:-cargo}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
gateway_bin="$target_dir/release/toolmark-gateway"
loadgen_bin="$target_dir/release/toolmark-loadgen"
origin="http://loadgen.test"

# Every page is a socket in the gateway and one in the load generator; both inherit this.
if ! ulimit -n 20000 2>/dev/null; then
    ulimit -n "$(ulimit -Hn)"
    echo "run.sh: open files limited to $(ulimit -n) (hard limit); large PAGES may fail with EMFILE" >&2
fi

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$root" && "$cargo" build --release --locked -p toolmark-gateway -p toolmark-loadgen)
fi

work="$(mktemp -d)"
gateway_pid=""
cleanup() {
    if [[ -n "$gateway_pid" ]] && kill -0 "$gateway_pid" 2>/dev/null; then
        kill -TERM "$gateway_pid" 2>/dev/null || true
        wait "$gateway_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

api_key="tmk_bench_$(random_hex 24)"
token_secret="$(random_hex 32)"
key_hash="$(printf '%s' "$api_key" | sha256sum | cut -d' ' -f1)"
cat >"$work/gateway.toml" <<EOF
[server]
listen = "127.0.0.1:0"
drain_timeout_ms = 2000

[broker]
kind = "memory"

[[tenants]]
id = "bench"
api_keys = ["sha256:$key_hash"]
token_secret = "$token_secret"
allowed_origins = ["$origin"]

[tenants.limits]
max_connections = 200000
max_pages_per_conversation = 32
calls_per_second = 100000
page_messages_per_second = 10000
EOF

# Starts a fresh gateway on an ephemeral loopback port; sets gateway_pid and gateway_url.
start_gateway() {
    local log="$work/gateway-$1.log" line="" _
    RUST_LOG="${GATEWAY_LOG:-info}" "$gateway_bin" --config "$work/gateway.toml" --listen 127.0.0.1:0 >"$log" 2>&1 &
    gateway_pid=$!
    for _ in $(seq 100); do
        line="$(grep -m1 -o 'listening on http://[0-9.:]*' "$log" || true)"
        [[ -n "$line" ]] && break
        kill -0 "$gateway_pid" 2>/dev/null || { cat "$log" >&2; echo "run.sh: the gateway exited" >&2; exit 1; }
        sleep 0.1
    done
    [[ -n "$line" ]] || { cat "$log" >&2; echo "run.sh: the gateway did not start" >&2; exit 1; }
    gateway_url="${line#listening on }"
    local addr="${gateway_url#http://}"
    for _ in $(seq 100); do
        if ready "${addr%:*}" "${addr##*:}"; then
            echo "run.sh: gateway $gateway_pid ready at $gateway_url" >&2
            return
        fi
        sleep 0.1
    done
    echo "run.sh: /readyz never answered 200" >&2
    exit 1
}

# Whether GET /readyz answers 200 (plain bash, no HTTP client needed).
ready() (
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf 'GET /readyz HTTP/1.0\r\nHost: %s:%s\r\n\r\n' "$1" "$2" >&3
    read -r _ status _ <&3 || exit 1
    [[ "$status" == "200" ]]
) 2>/dev/null

stop_gateway() {
    kill -TERM "$gateway_pid"
    wait "$gateway_pid" || true
    gateway_pid=""
}

loadgen() {
    TOOLMARK_BENCH_TOKEN_SECRET="$token_secret" TOOLMARK_BENCH_API_KEY="$api_key" \
        "$loadgen_bin" "$@" --url "$gateway_url" --tenant bench --origin "$origin" \
        --source-addrs "$source_addrs" --ramp-per-sec "$ramp"
}

echo "== idle: $pages pages" >&2
start_gateway idle
idle_result="$(loadgen idle --pages "$pages" --hold-secs "$hold" --gateway-pid "$gateway_pid")"
stop_gateway

echo "== calls: $rate calls/s for $duration s over $call_pages pages" >&2
start_gateway calls
calls_result="$(loadgen calls --pages "$call_pages" --rate "$rate" --duration-secs "$duration" --gateway-pid "$gateway_pid")"
stop_gateway

echo "== results"
printf '%s\n%s\n' "$idle_result" "$calls_result"
