#!/usr/bin/env bash
# The agent API against its OpenAPI document:
#   1. docs/openapi.json (kept equal to GET /v1/openapi.json by the gateway suite) validated as
#      OpenAPI 3.1 by openapi-spec-validator;
#   2. schemathesis fuzzing a dev-mode gateway (memory broker) with a page attached to
#      dev/u1/c1 (gateway/tests/api/page.py): no 5xx, every answer (errors included) valid
#      against the document with a listed problem code, and the stateful links (a call, then
#      GET /calls/{id}, then its cancel) followed; then the admin API on the admin listener.
#      Seeded, so a run is reproducible.
# The tools come from the package registry into a private venv (target/api-test/venv).
# /events, /admin/v1/events and /admin/v1/tenants/{id}/events (endless SSE streams), the console's
# page and files (HTML, script, style), and /mcp (JSON-RPC, driven by real MCP clients in
# scripts/mcp-e2e.sh) are left out of the fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { echo "api-test: python3 is missing; install with: apt-get install -y python3 python3-venv" >&2; exit 1; }
venv=target/api-test/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "api-test: cannot create a venv; install with: apt-get install -y python3-venv" >&2; exit 1; }
fi
"$venv/bin/python" -c 'import openapi_spec_validator, schemathesis, websockets' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    openapi-spec-validator==0.9.0 schemathesis==4.32.5 websockets==17.4

echo "api-test: docs/openapi.json is valid OpenAPI 3.1"
"$venv/bin/openapi-spec-validator" docs/openapi.json

scripts/debug-bins.sh
. scripts/dev-gateway.sh
page=""
cleanup() {
  [ -n "$page" ] && kill "$page" 2>/dev/null || true
  stop_dev_gateway
}
trap cleanup EXIT
start_dev_gateway
"$venv/bin/python" gateway/tests/api/page.py "$dev_url" "$dev_key" >"$dev_work/page" 2>&1 &
page=$!
for _ in $(seq 1 100); do
  grep -q 'page: attached' "$dev_work/page" 2>/dev/null && break
  kill -0 "$page" 2>/dev/null || { echo "api-test: the page did not attach:" >&2; cat "$dev_work/page" >&2; exit 1; }
  sleep 0.1
done
grep -q 'page: attached' "$dev_work/page" || { echo "api-test: the page did not attach in 10 s" >&2; exit 1; }

echo "api-test: schemathesis against $dev_url with a page attached"
(cd gateway/tests/api && "../../../$venv/bin/schemathesis" --config-file schemathesis.toml run \
  "$dev_url/v1/openapi.json" -H "Authorization: Bearer $dev_key" \
  --exclude-path-regex '/mcp$|/events$|^/admin/' --checks all --exclude-checks positive_data_acceptance \
  --seed 20261201 --max-examples 60 --request-timeout 15 --no-color --report-dir "$dev_work/report")

echo "api-test: schemathesis against the admin API at $dev_admin_url"
(cd gateway/tests/api && "../../../$venv/bin/schemathesis" run \
  "$dev_url/v1/openapi.json" --url "$dev_admin_url" -H "Authorization: Bearer $dev_admin_key" \
  --include-path-regex '^/admin/v1/(tenants|stats)' --exclude-path-regex '/events$' --checks all --exclude-checks positive_data_acceptance \
  --seed 20261201 --max-examples 60 --request-timeout 15 --no-color --report-dir "$dev_work/report-admin")
