#!/usr/bin/env bash
# `make profile`: CPU flame graphs of the gateway under call load, with `perf` (Debian's
# linux-perf) and `inferno` (`cargo install inferno`). Two cases, release builds on loopback:
#   one    one node, memory broker, ONE_RATE (12000) calls/s
#   cross  two nodes on one Redis (pages on node 1, the agent on node 2), CROSS_RATE (4000)
#          calls/s: one graph per node
# Each run lasts SECS (20) s; perf samples PERF_SECS (10) s of it at 499 Hz with DWARF call
# graphs. Output: docs/img/flame-one-node.svg, docs/img/flame-cross-agent-node.svg,
# docs/img/flame-cross-page-node.svg, and each run's JSON line on standard output (with the CPU
# per call of each process: the sampling adds to it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=load-tests/lib.sh
source "$root/load-tests/lib.sh"

one_rate="${ONE_RATE:-12000}"
stages="${PROFILE_STAGES:-one cross}"
cross_rate="${CROSS_RATE:-4000}"
secs="${SECS:-20}"
perf_secs="${PERF_SECS:-10}"
img="$root/docs/img"
for tool in perf inferno-collapse-perf inferno-flamegraph; do
    command -v "$tool" >/dev/null || { echo "profile.sh: $tool missing (apt-get install -y linux-perf; cargo install inferno)" >&2; exit 1; }
done

lt_raise_nofile
lt_build
lt_init

# Samples process $1 for perf_secs once the load generator has paused before its calls, and
# writes the flame graph $2.
sample() {
    until grep -q "per second for" "$lt_work/calls.err" 2>/dev/null; do sleep 0.1; done
    sleep 1
    perf record -q -F 499 --call-graph dwarf,16384 -p "$1" -o "$lt_work/$2.data" -- sleep "$perf_secs" 2>/dev/null
    perf script -i "$lt_work/$2.data" 2>/dev/null | inferno-collapse-perf | \
        inferno-flamegraph --title "toolmark-gateway: $3" >"$img/$2.svg"
    echo "profile.sh: wrote docs/img/$2.svg" >&2
}

calls() { # $1 pages URL, $2 agent URL, $3 rate, then the pids to report CPU per call of
    local pages_url="$1" agent_url="$2" rate="$3"
    shift 3
    TOOLMARK_BENCH_API_KEY="$lt_api_key" TOOLMARK_BENCH_TOKEN_SECRET="$lt_token_secret" \
        "$lt_loadgen_bin" calls --url "$pages_url" --agent-url "$agent_url" --pages 1000 --rate "$rate" \
        --duration-secs "$secs" --pause-before-secs 2 "$@" 2>"$lt_work/calls.err" | head -1
}

if [[ " $stages " == *" one "* ]]; then
rm -f "$lt_work/calls.err"
lt_write_config memory
lt_start_node one
sample "$lt_node_pid" flame-one-node "one node, memory broker, $one_rate calls/s" &
s1=$!
calls "$lt_node_url" "$lt_node_url" "$one_rate" --gateway-pid "$lt_node_pid"
wait "$s1"
kill -TERM "$lt_node_pid"
fi

if [[ " $stages " == *" cross "* ]]; then
rm -f "$lt_work/calls.err"
lt_start_redis
lt_write_config redis
lt_start_node 1; pages_url="$lt_node_url"; pages_pid="$lt_node_pid"
lt_start_node 2; agent_url="$lt_node_url"; agent_pid="$lt_node_pid"
sample "$agent_pid" flame-cross-agent-node "the agent's node (HTTP API), two nodes on Redis, $cross_rate calls/s" &
s1=$!
sample "$pages_pid" flame-cross-page-node "the pages' node, two nodes on Redis, $cross_rate calls/s" &
s2=$!
calls "$pages_url" "$agent_url" "$cross_rate" --gateway-pid "$pages_pid" --agent-gateway-pid "$agent_pid" --redis-pid "$lt_redis_pid"
wait "$s1" "$s2"
fi
