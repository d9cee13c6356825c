#!/usr/bin/env bash
# Drives the gateway's Pusher-protocol endpoint (Laravel Echo's transport) with the real pusher-js
# client in Node: the gateway in dev mode on a free loopback port, its dev tenant's API key and
# Pusher key and secret read from stderr (gateway/tests/pusher/echo.test.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null || { echo "pusher-test: node is missing; install with: apt-get install -y nodejs npm" >&2; exit 1; }

(cd gateway/tests/pusher && [ -d node_modules/pusher-js ] || npm install --no-audit --no-fund --silent --no-package-lock)

cargo build --locked -q -p toolmark-gateway
work=$(mktemp -d)
trap 'kill "$gw" 2>/dev/null || true; wait "$gw" 2>/dev/null || true; rm -rf "$work"' EXIT
RUST_LOG=warn target/debug/toolmark-gateway --listen 127.0.0.1:0 >"$work/out" 2>"$work/err" &
gw=$!
for _ in $(seq 1 100); do
  grep -q 'listening on' "$work/out" 2>/dev/null && break
  sleep 0.1
done
url=$(sed -n 's/^toolmark-gateway listening on //p' "$work/out")
key=$(grep -o 'tmk_dev_[0-9a-f]*' "$work/err" | head -1)
pusher_key=$(sed -n 's/.*pusher key \([^ ,]*\).*/\1/p' "$work/err" | head -1)
pusher_secret=$(sed -n 's/.*pusher secret \([^ ,]*\).*/\1/p' "$work/err" | head -1)
[ -n "$url" ] && [ -n "$key" ] && [ -n "$pusher_key" ] && [ -n "$pusher_secret" ] || {
  echo "pusher-test: the gateway did not start:" >&2; cat "$work/err" >&2; exit 1; }

cd gateway/tests/pusher
BASE_URL="$url" API_KEY="$key" PUSHER_KEY="$pusher_key" PUSHER_SECRET="$pusher_secret" TENANT=dev node --test echo.test.mjs
