#!/usr/bin/env bash
# Runs the demo page's end-to-end test: the gateway in dev mode on a free loopback port,
# headless Chromium driven by playwright-core (gateway/tests/browser/demo.test.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v chromium >/dev/null || { echo "browser-test: chromium is missing; install with: apt-get install -y chromium" >&2; exit 1; }
command -v node >/dev/null || { echo "browser-test: node is missing; install with: apt-get install -y nodejs npm" >&2; exit 1; }

(cd gateway/tests/browser && [ -d node_modules/playwright-core ] || npm install --no-audit --no-fund --silent)

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
[ -n "$url" ] && [ -n "$key" ] || { echo "browser-test: the gateway did not start:" >&2; cat "$work/err" >&2; exit 1; }

cd gateway/tests/browser
BASE_URL="$url" API_KEY="$key" TENANT=dev node --test demo.test.mjs
