#!/usr/bin/env bash
# `make rolling-upgrade`: a rolling replacement of two gateway nodes of the previous release
# (UPGRADE_BASE, default 928ba32) by nodes of this build, on one Redis, under agent calls at
# ROLL_RATE (500/s), then the rollback the same way; each step is the load generator's `storm`:
# ROLL_PAGES (2,000) pages on the node being replaced, calls through the node that replaces it
# (the other release), the node drained with SIGTERM as a rollout does, its pages reconnecting
# to the new node. Prints one JSON line per step (answered, timed out, lost, pages back) and a
# table; fails when a step loses a call or a page (docs/benchmarks.md, docs/deploy.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# shellcheck source=load-tests/lib.sh
. load-tests/lib.sh
lt_init
lt_raise_nofile
base="${UPGRADE_BASE:-928ba32}"
commit="$(git rev-parse --verify "$base^{commit}")" || { echo "rolling-upgrade: $base is not a commit" >&2; exit 2; }
rate="${ROLL_RATE:-500}"
pages="${ROLL_PAGES:-2000}"
cargo="${CARGO:-cargo}"

# The previous release's release build, from git (kept in target/upgrade-base/, sharing the
# dependencies of bench-compare's base builds).
old_bin="$root/target/upgrade-base/${commit:0:12}/toolmark-gateway-release"
if [[ ! -x "$old_bin" ]]; then
    src="$root/target/upgrade-base/${commit:0:12}/src-release"
    rm -rf "$src" && mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    (cd "$src" && TOOLMARK_REVISION="${commit:0:12}" CARGO_TARGET_DIR="$root/target/bench-compare-base" \
        "$cargo" build --release --locked -p toolmark-gateway --bin toolmark-gateway)
    cp "$root/target/bench-compare-base/release/toolmark-gateway" "$old_bin.tmp" && mv "$old_bin.tmp" "$old_bin"
    rm -rf "$src"
fi
lt_build
new_bin="$lt_gateway_bin"
echo "rolling-upgrade: $("$old_bin" --version) -> $("$new_bin" --version), $rate calls/s, $pages pages a node" >&2

lt_start_redis
DRAIN_TIMEOUT_MS="${ROLL_DRAIN_TIMEOUT_MS:-10000}" lt_write_config redis
start() { # $1 name, $2 binary: sets url_<name>, pid_<name>
    lt_gateway_bin="$2" lt_start_node "$1"
    printf -v "url_$1" %s "$lt_node_url"
    printf -v "pid_$1" %s "$lt_node_pid"
}
results=()
n=0
step() { # $1 label, $2 replaced node, $3 its replacement
    local url_from="url_$2" pid_from="pid_$2" url_to="url_$3" res
    echo "== $1: node $2 drained under $rate calls/s through node $3" >&2
    n=$((n + 1))
    res="$(TOOLMARK_BENCH_TOKEN_SECRET="$lt_token_secret" TOOLMARK_BENCH_API_KEY="$lt_api_key" \
        "$lt_loadgen_bin" storm --url "${!url_from}" --fallback-url "${!url_to}" --drain-pid "${!pid_from}" \
        --tenant bench --origin "$lt_origin" --user-prefix "s${n}u" \
        --pages "$pages" --rate "$rate" | sed -n 1p)" || true
    [[ -n "$res" ]] || { echo "rolling-upgrade: $1 did not report" >&2; exit 1; }
    wait "${!pid_from}" 2>/dev/null || true
    res="$(python3 -c 'import json,sys; l=json.loads(sys.argv[1]); l["step"]=sys.argv[2]; print(json.dumps(l))' "$res" "$1")"
    echo "$res"
    results+=("$res")
}
# The deployment before: two nodes of the previous release.
start old1 "$old_bin"
start old2 "$old_bin"
# The upgrade, one node at a time (maxSurge 1: the new node is ready before the old one goes).
start new1 "$new_bin"; step "upgrade 1 of 2" old1 new1
start new2 "$new_bin"; step "upgrade 2 of 2" old2 new2
# The rollback, the same way.
start back1 "$old_bin"; step "rollback 1 of 2" new1 back1
start back2 "$old_bin"; step "rollback 2 of 2" new2 back2

python3 - "${results[@]}" <<'PY'
import json, sys
rows = [json.loads(a) for a in sys.argv[1:]]
print("| step | calls sent | answered | timed out | lost | pages back (all) | answered p99 |")
print("|---|---|---|---|---|---|---|")
bad = 0
for r in rows:
    print(f"| {r['step']} | {r['sent']} | {r['answered']} | {r['timed_out']} | {r['lost']} | {r['came_back']} ({r['all_back_ms']} ms) | {r['answered_p99_us']} µs |")
    bad += r["lost"] + (r["all_back_ms"] is None)
sys.exit(1 if bad else 0)
PY
