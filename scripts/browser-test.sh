#!/usr/bin/env bash
# Runs the browser end-to-end tests: the gateway in dev mode on a free loopback port, headless
# Chromium driven by playwright-core: the demo page (gateway/tests/browser/demo.test.mjs) and a
# WebMCP page with @mcp-b/webmcp-polyfill (gateway/tests/browser/webmcp.test.mjs); first, in Node,
# the protocol rules of the WebMCP module (webmcp/test). Then the operator's console
# (gateway/tests/browser/console.test.mjs) against two gateways sharing a redis-server on a free
# port, and a tampered WebMCP page under pinned tools (webmcp-pins.test.mjs) on the same nodes.
# CONSOLE_SCREENSHOTS=1 writes the console's views to docs/img/console/.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v chromium >/dev/null || { echo "browser-test: chromium is missing; install with: apt-get install -y chromium" >&2; exit 1; }
command -v node >/dev/null || { echo "browser-test: node is missing; install with: apt-get install -y nodejs npm" >&2; exit 1; }

(cd gateway/tests/browser && { [ -d node_modules/playwright-core ] && [ -d node_modules/@mcp-b/webmcp-polyfill ]; } || npm install --no-audit --no-fund --silent)

node --test webmcp/test/

scripts/debug-bins.sh
. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT
start_dev_gateway

(cd gateway/tests/browser && BASE_URL="$dev_url" API_KEY="$dev_key" TENANT=dev node --test --test-concurrency=1 demo.test.mjs webmcp.test.mjs)
stop_dev_gateway

# The console: two nodes on one Redis, with an admin API; call figures shared every 100 ms
# (the shortest server.stats_flush_ms), so that the cluster-wide figures the test waits for
# move within a poll; webhooks given up on after a second, so that a dead letter appears while
# the test runs.
command -v redis-server >/dev/null || { echo "browser-test: redis-server is missing; install with: apt-get install -y redis-server" >&2; exit 1; }
console_work=$(mktemp -d)
console_nodes=()
stop_console_nodes() {
  for pid in "${console_nodes[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  [ -f "$console_work/redis.pid" ] && kill "$(cat "$console_work/redis.pid")" 2>/dev/null || true
  rm -rf "$console_work"
}
trap 'stop_console_nodes; stop_dev_gateway' EXIT
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$console_work/redis.pid" --logfile "$console_work/redis.log"
for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
admin_key="tma_console_$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
cat >"$console_work/gateway.toml" <<TOML
[server]
run_jobs = true
stats_flush_ms = 100

[broker]
kind = "redis"
url = "redis://127.0.0.1:$redis_port"

[admin]
api_keys = ["sha256:$(printf %s "$admin_key" | sha256sum | cut -d' ' -f1)"]
encryption_key = "base64:$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"

[worker]
webhook_backoff_base_ms = 100
webhook_max_age_secs = 1
TOML
urls=()
admins=()
for n in 1 2; do
  RUST_LOG=warn "${CARGO_TARGET_DIR:-target}"/debug/toolmark-gateway --config "$console_work/gateway.toml" --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 --node-id "node-$n" >"$console_work/out-$n" 2>"$console_work/err-$n" &
  console_nodes+=("$!")
  for _ in $(seq 1 100); do grep -q 'admin listening on' "$console_work/out-$n" 2>/dev/null && break; sleep 0.1; done
  urls+=("$(sed -n 's/^toolmark-gateway listening on //p' "$console_work/out-$n")")
  admins+=("$(sed -n 's/^toolmark-gateway admin listening on //p' "$console_work/out-$n")")
done
if [ -z "${admins[0]:-}" ] || [ -z "${urls[1]:-}" ]; then
  echo "browser-test: the two console gateways did not start:" >&2
  cat "$console_work"/err-* >&2
  exit 1
fi
shots=()
[ "${CONSOLE_SCREENSHOTS:-}" = 1 ] && shots=(SCREENSHOT_DIR="$PWD/docs/img/console")
(cd gateway/tests/browser && env "${shots[@]}" ADMIN_URL="${admins[0]}" ADMIN_KEY="$admin_key" NODE1_URL="${urls[0]}" \
  NODE2_URL="${urls[1]}" node --test --test-concurrency=1 console.test.mjs)
# A tampered WebMCP page under a tenant that pins its tools (created through the same admin API).
(cd gateway/tests/browser && BASE_URL="${urls[0]}" ADMIN_URL="${admins[0]}" ADMIN_KEY="$admin_key" \
  node --test --test-concurrency=1 webmcp-pins.test.mjs)
