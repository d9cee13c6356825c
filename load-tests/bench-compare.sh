#!/usr/bin/env bash
# `make bench-compare BASE=<git ref>`: the gateway figures of the working tree against those of
# BASE, measured in one run on this machine with the same load, so that drift between days and
# machines cancels out. Builds BASE's gateway in a worktree of its own, the working tree's
# gateway and load generator as usual, then runs the working tree's load-tests/bench.sh with
# each gateway and the same load generator, alternating
# (BASE, HEAD, HEAD, BASE, … for ROUNDS pairs, default 2), and prints each figure with the ratio
# HEAD / BASE of every pair.
#   BENCH_STAGES  stages of bench.sh to compare (default "cross calls")
#   ROUNDS        pairs of runs (default 2)
#   OUT           where the reports and the summary go (default docs/img/bench-compare)
#   BASE_KEY_POLICY, HEAD_KEY_POLICY  the policy of the bench tenant's API key on each side
#                 (`LT_KEY_POLICY` of lib.sh; default none): with BASE=HEAD, the cost of a
#                 policy against none on one build
#   BASE_ENV, HEAD_ENV  `VAR=value …` set for each side's run (its gateways inherit them): with
#                 BASE=HEAD and HEAD_ENV="OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"
#                 (and `load-tests/otlp-sink.py` serving there), what exporting traces costs
# Other variables (SWEEP, SWEEP_SECS, CROSS_RATE, …) pass through to bench.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE:?set BASE to the git ref to compare against, e.g. BASE=HEAD~1}"
rounds="${ROUNDS:-2}"
export BENCH_STAGES="${BENCH_STAGES:-cross calls}"
out="${OUT:-$root/docs/img/bench-compare}"
cargo="${CARGO:-cargo}"

base_commit="$(git -C "$root" rev-parse --short "$base")"
head_commit="$(git -C "$root" describe --always --dirty)"
work="$(mktemp -d)"
cleanup() {
    git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

echo "bench-compare: building $base_commit (BASE) and $head_commit (working tree)" >&2
git -C "$root" worktree add --detach "$work/base" "$base_commit" >/dev/null
base_target="${BASE_TARGET_DIR:-$root/target/bench-compare-base}"
(cd "$work/base" && CARGO_TARGET_DIR="$base_target" "$cargo" build --release --locked -p toolmark-gateway)
(cd "$root" && "$cargo" build --release --locked -p toolmark-gateway -p toolmark-loadgen)

mkdir -p "$out"
head_target="${CARGO_TARGET_DIR:-$root/target}"
run() { # $1 label, $2 commit, $3 target dir, $4 round, $5 the API key's policy, $6 environment
    echo "bench-compare: round $4, $1 ($2)${5:+ key policy $5}${6:+ with $6}" >&2
    # shellcheck disable=SC2086 # `VAR=value` words, split on purpose
    env $6 LT_KEY_POLICY="$5" BENCH_COMMIT="$2" CARGO_TARGET_DIR="$3" SKIP_BUILD=1 OUT="$out/$1-$4" CHART="$work/chart.svg" \
        LOADGEN_BIN="$head_target/release/toolmark-loadgen" "$root/load-tests/bench.sh"
}
for r in $(seq "$rounds"); do
    if (( r % 2 )); then
        run base "$base_commit" "$base_target" "$r" "${BASE_KEY_POLICY:-}" "${BASE_ENV:-}"
        run head "$head_commit" "$head_target" "$r" "${HEAD_KEY_POLICY:-}" "${HEAD_ENV:-}"
    else
        run head "$head_commit" "$head_target" "$r" "${HEAD_KEY_POLICY:-}" "${HEAD_ENV:-}"
        run base "$base_commit" "$base_target" "$r" "${BASE_KEY_POLICY:-}" "${BASE_ENV:-}"
    fi
done

python3 - "$out" "$rounds" "$base_commit" "$head_commit" <<'PY' | tee "$out/summary.md"
import json, sys, os
out, rounds, base, head = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def figures(path):
    """Every comparable figure of one bench.sh report, by name."""
    f = {}
    for line in open(path):
        r = json.loads(line)
        stage = r.get("stage")
        if stage in ("calls", "cross") and "rate" in r and "redis_commands_per_call" not in r:
            for k, v in r.items():
                if k in ("p50_us", "p99_us") or k.endswith(("_cpu_us_per_call", "_context_switches_per_call", "_syscalls_per_call")):
                    f[f"{stage} {r['rate']}/s {k}"] = v
            top = f"{stage} highest rate with p99 < 20 ms"
            if r["p99_us"] < 20_000 and r.get("errors", 0) == 0:
                f[top] = max(f.get(top) or 0, r["rate"])
        elif stage == "doors":
            for k, v in r.items():
                if k in ("p50_us", "p99_us") or k.endswith(("_cpu_us_per_call", "_context_switches_per_call", "_syscalls_per_call")):
                    f[f"doors {r['door']} HTTP/{r['http']} {r['rate']}/s {k}"] = v
        elif stage == "cross-rate":
            for k, v in r.items():
                if k in ("p50_us", "p99_us") or k.endswith(("_cpu_us_per_call", "_context_switches_per_call", "_syscalls_per_call")):
                    f[f"cross {r['rate']}/s {r['duration_secs']} s {k}"] = v
            f["redis commands per cross-node call"] = r.get("redis_commands_per_call_total")
            f["redis scripts per cross-node call"] = r.get("redis_scripts_per_call")
            f["redis commands per page closed (1,000 pages)"] = r.get("redis_commands_per_page_closed")
            f["redis bytes per finished call"] = r.get("redis_bytes_per_finished_call")
            f["sharded channels, two nodes, 1,000 pages"] = r.get("sharded_channels_two_nodes_1000_pages")
        elif stage == "finished-calls":
            f[f"memory broker RSS bytes per finished call ({r.get('sent')} calls)"] = r.get("rss_bytes_per_finished_call")
        elif stage == "handshakes":
            for k in ("setup_p50_us", "setup_p99_us", "setup_max_us", "setups_over_900ms", "listen_drops", "listen_backlog",
                      "gateway_cpu_us_per_setup", "gateway_context_switches_per_setup"):
                f[f"handshakes {r.get('pages')} pages × {r.get('concurrency')} {k}"] = r.get(k)
        elif stage and stage.startswith("reference-"):
            for k, v in r.items():
                if k.endswith("_us") or "_per_" in k or k == "elapsed_ms":
                    f[f"{stage} {k}"] = v
        elif stage == "idle":
            f[f"idle {r.get('pages')} pages KiB per page"] = r.get("kib_per_page")
            f[f"idle {r.get('pages')} pages CPU µs per page per second"] = r.get("cpu_us_per_page_per_sec")
        elif stage == "storm":
            for k in ("all_back_ms", "lost", "draining_node_unrecorded"):
                f[f"storm {k}"] = r.get(k)
    return f

runs = {(lab, r): figures(os.path.join(out, f"{lab}-{r}", "report.jsonl"))
        for lab in ("base", "head") for r in range(1, rounds + 1)}
names = sorted({n for f in runs.values() for n in f})
print(f"| figure | {base} (BASE) | {head} | ratio HEAD / BASE |")
print("|---|---|---|---|")
for n in names:
    b = [runs[("base", r)].get(n) for r in range(1, rounds + 1)]
    h = [runs[("head", r)].get(n) for r in range(1, rounds + 1)]
    ratios = [f"×{y / x:.2f}" if x and y is not None else "–" for x, y in zip(b, h)]
    show = lambda v: ", ".join("–" if x is None else str(x) for x in v)
    print(f"| {n} | {show(b)} | {show(h)} | {', '.join(ratios)} |")
PY
echo "bench-compare: summary in ${out#"$root"/}/summary.md" >&2
