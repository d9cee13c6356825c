#!/usr/bin/env bash
# The integration kit in examples/, run against a dev-mode gateway: a page token minted by the
# Node, Python and PHP examples (examples/tokens/) opens a page socket and its page becomes the
# conversation's current page (examples/tokens/check_page.py); the agent loop
# (examples/agent-loop/) runs with a scripted model against a simulated page.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null || { echo "examples-test: $1 is missing; install with: $2" >&2; exit 1; }; }
need python3 "apt-get install -y python3 python3-venv"
need node "apt-get install -y nodejs"
need php "apt-get install -y php-cli"

venv=target/examples-test/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "examples-test: cannot create a venv; install with: apt-get install -y python3-venv" >&2; exit 1; }
fi
"$venv/bin/python" -c 'import websockets' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check websockets==17.4

scripts/debug-bins.sh
. scripts/dev-gateway.sh
trap stop_dev_gateway EXIT
start_dev_gateway
export TOOLMARK_TENANT=dev TOOLMARK_TOKEN_SECRET="$dev_token_secret"

failed=0
for lang in node python php; do
  conversation="tokens-$lang"
  case "$lang" in
    node) token=$(node examples/tokens/mint.mjs u1 "$conversation") ;;
    python) token=$(python3 examples/tokens/mint.py u1 "$conversation") ;;
    php) token=$(php examples/tokens/mint.php u1 "$conversation") ;;
  esac
  if "$venv/bin/python" examples/tokens/check_page.py "$dev_url" "$dev_key" dev u1 "$conversation" "$token"; then
    echo "examples-test: a page token minted in $lang opens a page"
  else
    echo "examples-test: the page token minted in $lang was refused" >&2
    failed=1
  fi
done

echo "examples-test: the agent loop (examples/agent-loop) with a scripted model, both tool-use shapes"
(cd examples/agent-loop && "../../$venv/bin/python" test_agent.py "$dev_url" "$dev_key" dev) || failed=1
exit "$failed"
