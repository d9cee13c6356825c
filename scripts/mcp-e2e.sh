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

cargo build --locked -q -p toolmark-mcp -p toolmark-gateway
export TOOLMARK_MCP="$PWD/target/debug/toolmark-mcp"

. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT

failed=0
start_dev_gateway

echo "mcp-e2e: Python MCP client (toolmark-mcp over stdio; the gateway's hosted endpoint)"
(cd "$e2e" && BASE_URL="$dev_url" DEV_KEY="$dev_key" .venv/bin/python -m pytest -q -p no:cacheprovider \
  test_python_client.py test_hosted_python.py) || failed=1

echo "mcp-e2e: MCP Inspector CLI (toolmark-mcp; the hosted endpoint) and the demo page in Chromium"
(cd "$e2e" && BASE_URL="$dev_url" DEV_KEY="$dev_key" node --test inspector.test.mjs hosted-inspector.test.mjs browser.test.mjs) || failed=1
exit "$failed"
