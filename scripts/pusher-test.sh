#!/usr/bin/env bash
# Drives the gateway's Pusher-protocol endpoint (Laravel Echo's transport) with the real pusher-js
# client in Node: the gateway in dev mode on a free loopback port, its dev tenant's API key and
# Pusher key and secret read from stderr (gateway/tests/pusher/echo.test.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null || { echo "pusher-test: node is missing; install with: apt-get install -y nodejs npm" >&2; exit 1; }

(cd gateway/tests/pusher && [ -d node_modules/pusher-js ] || npm install --no-audit --no-fund --silent --no-package-lock)

scripts/debug-bins.sh
. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT
start_dev_gateway
[ -n "$dev_pusher_key" ] && [ -n "$dev_pusher_secret" ] || { echo "pusher-test: no dev Pusher key printed" >&2; exit 1; }

cd gateway/tests/pusher
BASE_URL="$dev_url" API_KEY="$dev_key" PUSHER_KEY="$dev_pusher_key" PUSHER_SECRET="$dev_pusher_secret" TENANT=dev node --test echo.test.mjs
