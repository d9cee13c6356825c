#!/usr/bin/env bash
# Runs the browser end-to-end tests: the gateway in dev mode on a free loopback port, headless
# Chromium driven by playwright-core: the demo page (gateway/tests/browser/demo.test.mjs) and a
# WebMCP page with @mcp-b/webmcp-polyfill (gateway/tests/browser/webmcp.test.mjs); first, in Node,
# the protocol rules of the WebMCP module (webmcp/test).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v chromium >/dev/null || { echo "browser-test: chromium is missing; install with: apt-get install -y chromium" >&2; exit 1; }
command -v node >/dev/null || { echo "browser-test: node is missing; install with: apt-get install -y nodejs npm" >&2; exit 1; }

(cd gateway/tests/browser && { [ -d node_modules/playwright-core ] && [ -d node_modules/@mcp-b/webmcp-polyfill ]; } || npm install --no-audit --no-fund --silent)

node --test webmcp/test/

cargo build --locked -q -p toolmark-gateway
. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT
start_dev_gateway

cd gateway/tests/browser
BASE_URL="$dev_url" API_KEY="$dev_key" TENANT=dev node --test --test-concurrency=1 demo.test.mjs webmcp.test.mjs
