#!/usr/bin/env bash
# The agent API's OpenAPI document: docs/openapi.json (kept equal to GET /v1/openapi.json by
# the gateway suite) validated as OpenAPI 3.1 by openapi-spec-validator, installed from the
# package registry into a private venv (target/api-test/venv).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { echo "api-test: python3 is missing; install with: apt-get install -y python3 python3-venv" >&2; exit 1; }
venv=target/api-test/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "api-test: cannot create a venv; install with: apt-get install -y python3-venv" >&2; exit 1; }
fi
"$venv/bin/python" -c 'import openapi_spec_validator' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check openapi-spec-validator==0.9.0

echo "api-test: docs/openapi.json is valid OpenAPI 3.1"
"$venv/bin/openapi-spec-validator" docs/openapi.json
