#!/usr/bin/env bash
# End-to-end tests of toolmark-mcp and of the gateway's hosted MCP endpoint with real MCP
# clients: the Python SDK (pytest), the MCP Inspector CLI and the TypeScript SDK with the demo
# page in headless Chromium (node --test).
# Installs the clients it needs (a venv and npm packages under mcp/tests/e2e), builds the
# binaries, starts the gateway in dev mode for the browser test, and fails when anything is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null || { echo "mcp-e2e: $1 is missing; install with: $2" >&2; exit 1; }; }
need python3 "apt-get install -y python3 python3-venv"
need node "apt-get install -y nodejs npm"
need npm "apt-get install -y npm"
need chromium "apt-get install -y chromium"

e2e=mcp/tests/e2e
venv=$e2e/.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "mcp-e2e: cannot create a venv; install with: apt-get install -y python3-venv" >&2; exit 1; }
fi
"$venv/bin/python" -c 'import mcp, websockets, pytest' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$e2e/requirements.txt"
(cd "$e2e" && node -e 'for (const p of ["@modelcontextprotocol/sdk/package.json","@modelcontextprotocol/inspector/package.json","playwright-core/package.json","ws/package.json"]) require.resolve(p)' 2>/dev/null ||
  npm install --no-audit --no-fund --no-package-lock --silent)

scripts/debug-bins.sh
export TOOLMARK_MCP="$PWD/target/debug/toolmark-mcp"

. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT

failed=0
start_dev_gateway

echo "mcp-e2e: Python MCP client (toolmark-mcp over stdio; the gateway's hosted endpoint)"
(cd "$e2e" && BASE_URL="$dev_url" DEV_KEY="$dev_key" .venv/bin/python -m pytest -q -p no:cacheprovider \
  test_python_client.py test_hosted_python.py) || failed=1

echo "mcp-e2e: the Python MCP client on node 2 of two gateways on one Redis, the page on node 1"
redis_work=$(mktemp -d)
two_nodes=()
stop_two_nodes() {
  for pid in "${two_nodes[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$redis_work/redis.pid" ] && kill "$(cat "$redis_work/redis.pid")" 2>/dev/null || true
  rm -rf "$redis_work"
}
trap 'stop_two_nodes; stop_dev_gateway' EXIT
command -v redis-server >/dev/null || { echo "mcp-e2e: redis-server is missing; install with: apt-get install -y redis-server" >&2; exit 1; }
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$redis_work/redis.pid" --logfile "$redis_work/redis.log"
for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
key="tmk_e2e_$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
cat >"$redis_work/gateway.toml" <<TOML
[server]
run_jobs = true

[broker]
kind = "redis"
url = "redis://127.0.0.1:$redis_port"

[[tenants]]
id = "dev"
api_keys = ["sha256:$(printf %s "$key" | sha256sum | cut -d' ' -f1)"]
token_secret = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
allowed_origins = ["http://localhost:5173"]
TOML
urls=()
for n in 1 2; do
  target/debug/toolmark-gateway --config "$redis_work/gateway.toml" --listen 127.0.0.1:0 --node-id "node-$n" \
    >"$redis_work/out-$n" 2>"$redis_work/err-$n" &
  two_nodes+=("$!")
  for _ in $(seq 1 100); do grep -q 'listening on' "$redis_work/out-$n" 2>/dev/null && break; sleep 0.1; done
  urls+=("$(sed -n 's/^toolmark-gateway listening on //p' "$redis_work/out-$n")")
done
if [ -z "${urls[0]}" ] || [ -z "${urls[1]}" ]; then
  echo "mcp-e2e: the two gateways did not start:" >&2; cat "$redis_work"/err-* >&2; failed=1
else
  (cd "$e2e" && BASE_URL="${urls[1]}" PAGE_BASE_URL="${urls[0]}" PAGE_ORIGIN="http://localhost:5173" DEV_KEY="$key" \
    .venv/bin/python -m pytest -q -p no:cacheprovider test_hosted_python.py) || failed=1
fi
stop_two_nodes
two_nodes=()

echo "mcp-e2e: MCP Inspector CLI (toolmark-mcp; the hosted endpoint) and the demo page in Chromium"
(cd "$e2e" && BASE_URL="$dev_url" DEV_KEY="$dev_key" node --test inspector.test.mjs hosted-inspector.test.mjs browser.test.mjs) || failed=1
exit "$failed"
