#!/usr/bin/env bash
# Proves that `make load-test` judges the gateway: the mixed k6 scenario must pass (exit 0)
# against a healthy two-node gateway and fail (k6's exit 99, thresholds crossed) against the
# same gateway slowed on purpose (node 1, which holds the pages, stopped 150 ms in every 300 ms).
# Shorter runs than `make load-test`: about a minute in all.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
export PAGE_SECONDS="${PAGE_SECONDS:-20}" CALL_SECONDS="${CALL_SECONDS:-14}" CALL_START_SECONDS="${CALL_START_SECONDS:-4}"

echo "== healthy gateway: expecting exit 0" >&2
"$here/load-test.sh" >"$logs/healthy" 2>&1
healthy=$?
echo "== slowed gateway: expecting a non-zero exit" >&2
SKIP_BUILD=1 SLOW_GATEWAY=1 "$here/load-test.sh" >"$logs/slow" 2>&1
slow=$?

grep -E "✓|✗" "$logs/healthy" | sed 's/^/healthy: /' >&2
grep -E "✓|✗" "$logs/slow" | sed 's/^/slowed:  /' >&2
echo "healthy gateway: exit $healthy; slowed gateway: exit $slow" >&2
if [[ "$healthy" -eq 0 && "$slow" -ne 0 ]]; then
    echo "PASS: the load test passes a healthy gateway and fails a slow one" >&2
else
    echo "FAIL: expected exit 0 then non-zero" >&2
    exit 1
fi
