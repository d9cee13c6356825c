#!/usr/bin/env bash
# `make bench` (load part): regenerates the gateway figures of docs/benchmarks.md on this
# machine, each stage against fresh release processes on loopback:
#   idle   RSS per idle page at IDLE_PAGES (default "10000 19000") on one node (memory broker),
#          and the gateway's CPU per idle page per second over 60 s (its pings included); the
#          pages are spread over two load-generator processes (open files are capped per
#          process)
#   calls  call round trip on one node at SWEEP rates (default "1000 2000 … 10000 12000"),
#          SWEEP_SECS (10) each, until p99 passes 20 ms
#   cross  the same across two nodes on Redis (pages on node 1, agent on node 2), plus Redis
#          commands per call from INFO commandstats at CROSS_RATE (1000) for CROSS_SECS (20),
#          read when the last call is answered (the pages closing after it counted apart)
#          (with every process's system calls per call, counted by `perf stat`),
#          the Redis memory each finished call keeps, and the sharded channels both nodes hold
#   handshakes  HANDSHAKE_PAGES (10000) pages connecting to one node (memory broker),
#          HANDSHAKE_CONCURRENCY (200) set-ups at a time: set-up percentiles, set-ups past 900 ms
#          (a retransmitted SYN), and the kernel's listen overflows and drops meanwhile
#   storm  STORM_PAGES (10000) pages on node 1, calls at STORM_RATE (200/s) through node 2,
#          node 1 drained (drain timeout STORM_DRAIN_TIMEOUT_MS, 10000): time until every page
#          is back on node 2, how every call ended, and how many page releases and events the
#          draining node failed to record in Redis (its log's warnings)
#   finished-calls  FINISHED_RATE (2000) calls/s for FINISHED_SECS (20) through one node on the
#          memory broker, 1,000 pages: the node's RSS before the first call (pages connected)
#          and 3 s after the last, over the calls made: what a finished call keeps for its
#          retention (5 min, so every call of the run is still kept)
#   reloads  one open conversation whose page reloads RELOADS (3000) times with a
#          RELOAD_MANIFEST_BYTES (10240) manifest: the node's RSS per reload on the memory broker,
#          and on Redis its used_memory per reload beside the node's RSS
#   doors  the same cross-node call through each door, in one run on one pair of nodes on Redis:
#          the agent API and the hosted MCP endpoint (stateless revision), each over HTTP/1.1
#          and over HTTP/2 (h2c), at DOORS_RATE (2000/s) for DOORS_SECS (15): latency and the CPU,
#          context switches and system calls per call of both nodes and Redis (not in the default stages)
#   tasks  what an MCP task costs in Redis (load-tests/mcp-task-cost.py): TASK_CALLS (200)
#          calls of a consequential tool through the hosted MCP endpoint of one node on Redis,
#          confirmed in the page, by a client without tasks and by one that declares them
#   reference  the same client against another Pusher-protocol server already running at
#          REFERENCE_URL (app REFERENCE_APP_ID, key REFERENCE_KEY, secret REFERENCE_SECRET; see
#          docs/benchmarks.md for the server and its configuration), in one run with one node
#          of ours: our call round trip against its one-way publish→deliver at REFERENCE_RATE
#          (2000/s) over 1000 pages or channels for REFERENCE_SECS (20), then HANDSHAKE_PAGES
#          sockets at HANDSHAKE_CONCURRENCY against its /app/<key>, our Laravel Echo socket
#          (same Pusher client) and our page socket; not in the default stages. With
#          REFERENCE_PID (the server's process id) its CPU per event and per set-up and its
#          memory per open socket too; REFERENCE_CMD (its command line) instead starts the
#          server for the stage and stops it after, so that each round measures a fresh one
# SWEEP_SYSCALLS=1 counts every process's system calls in the sweeps too (`perf stat`, which
# adds a little to each system call: the ceilings are read without it).
# Stages: BENCH_STAGES (default "idle calls cross reloads tasks handshakes storm"). Output: one JSON line per run in
# $OUT/report.jsonl (OUT default docs/img/bench), and the chart docs/img/latency-vs-rate.svg.
# Refuses to start while a compiler, test run or browser is busy unless BENCH_ANYWAY=1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=load-tests/lib.sh
source "$root/load-tests/lib.sh"

stages="${BENCH_STAGES:-idle calls cross reloads tasks handshakes storm}"
handshake_pages="${HANDSHAKE_PAGES:-10000}"
handshake_concurrency="${HANDSHAKE_CONCURRENCY:-200}"
idle_pages="${IDLE_PAGES:-10000 19000}"
sweep="${SWEEP:-1000 2000 4000 6000 8000 10000 12000}"
sweep_secs="${SWEEP_SECS:-10}"
cross_rate="${CROSS_RATE:-1000}"
cross_secs="${CROSS_SECS:-20}"
reference_rate="${REFERENCE_RATE:-2000}"
reference_secs="${REFERENCE_SECS:-20}"
storm_pages="${STORM_PAGES:-10000}"
storm_rate="${STORM_RATE:-200}"
out="${OUT:-$root/docs/img/bench}"
chart="${CHART:-$root/docs/img/latency-vs-rate.svg}"
busy_pattern='rustc|cargo test|cargo build|cargo clippy|node |chromium'

if [[ " $stages " == *" cross "* || " $stages " == *" doors "* || -n "${SWEEP_SYSCALLS:-}" ]] && ! command -v perf >/dev/null; then
    echo "bench.sh: the cross and doors stages count system calls with perf: apt-get install -y linux-perf" >&2
    exit 1
fi
lt_raise_nofile
lt_build
mkdir -p "$out"
report="$out/report.jsonl"
: >"$report"

# Waits until no compiler, test or browser has run for 5 s (the figures would be disturbed).
quiet_machine() {
    [[ -n "${BENCH_ANYWAY:-}" ]] && return
    local calm=0 waited=0
    while (( calm < 5 )); do
        if pgrep -f "$busy_pattern" >/dev/null; then calm=0; else calm=$((calm + 1)); fi
        sleep 1
        waited=$((waited + 1))
        if (( waited == 600 )); then
            echo "bench.sh: the machine stayed busy for 10 min; set BENCH_ANYWAY=1 to measure anyway" >&2
            exit 1
        fi
    done
}

# Appends a JSON line to the report with the stage and the machine's facts.
record() {
    LT_ROOT="$root" LT_GATEWAY="$lt_gateway_bin" python3 - "$1" "$2" "$report" <<'PY'
import json, os, subprocess, sys, datetime
stage, line, report = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
mem_kib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
line.update({
    "stage": stage,
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "cores": os.cpu_count(),
    "mem_gib": round(mem_kib / 1048576, 1),
    # The commit of the binaries measured (bench-compare measures another ref's).
    "commit": os.environ.get("BENCH_COMMIT") or subprocess.run(["git", "-C", os.environ["LT_ROOT"], "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip(),
    "gateway_version": subprocess.run([os.environ["LT_GATEWAY"], "--version"], capture_output=True, text=True).stdout.strip(),
})
with open(report, "a") as f:
    f.write(json.dumps(line, sort_keys=True) + "\n")
PY
}

field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$1" "$2"; }

loadgen() {
    TOOLMARK_BENCH_TOKEN_SECRET="$lt_token_secret" TOOLMARK_BENCH_API_KEY="$lt_api_key" \
        "$lt_loadgen_bin" "$@" --tenant bench --origin "$lt_origin"
}

stop_all() {
    local p
    for p in "${lt_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    lt_pids=()
}

# The rate sweep against pages on $1 with agent calls through $2; lines go to $3; the other
# arguments pass to every run (the pids whose CPU and context switches per call are reported).
sweep_rates() {
    local r res p99 errors pages_url="$1" agent_url="$2" lines="$3"
    shift 3
    : >"$lines"
    for r in $sweep; do
        quiet_machine
        res="$(loadgen calls --url "$pages_url" --agent-url "$agent_url" --pages 1000 --rate "$r" --duration-secs "$sweep_secs" ${SWEEP_SYSCALLS:+--syscalls} "$@" 2>"$lt_work/sweep.err" | sed -n 1p)" || true
        if [[ -z "$res" ]]; then
            echo "bench.sh: rate $r/s failed:" >&2; tail -3 "$lt_work/sweep.err" >&2; break
        fi
        echo "$res" >>"$lines"
        p99="$(field "$res" p99_us)"; errors="$(field "$res" errors)"
        echo "bench.sh: $r calls/s: p50 $(field "$res" p50_us) µs, p99 $p99 µs, $errors errors" >&2
        if [[ "$p99" -gt 20000 || "$errors" -gt 0 ]]; then break; fi
    done
}

lt_init
for stage in $stages; do
    case "$stage" in
    idle)
        lt_write_config memory
        for n in $idle_pages; do
            lt_start_node idle
            quiet_machine
            echo "== idle: $n pages" >&2
            res="$(loadgen idle --url "$lt_node_url" --pages "$n" --processes 2 --gateway-pid "$lt_node_pid" | sed -n 1p)"
            echo "$res"
            record idle "$res"
            stop_all
        done
        ;;
    calls)
        lt_write_config memory
        lt_start_node single
        echo "== calls on one node: $sweep" >&2
        sweep_rates "$lt_node_url" "$lt_node_url" "$out/single-node.jsonl" --gateway-pid "$lt_node_pid"
        while read -r l; do record calls "$l"; done <"$out/single-node.jsonl"
        stop_all
        ;;
    cross)
        lt_start_redis
        lt_write_config redis
        lt_start_node 1; node1="$lt_node_url"; pid1="$lt_node_pid"
        lt_start_node 2; node2="$lt_node_url"; pid2="$lt_node_pid"
        # CPU and context switches per call of each process: pages' node, agent's node, Redis.
        costs=(--gateway-pid "$pid1" --agent-gateway-pid "$pid2" --redis-pid "$lt_redis_pid")
        quiet_machine
        echo "== cross-node calls at $cross_rate/s for $cross_secs s, Redis commands per call" >&2
        loadgen calls --url "$node1" --agent-url "$node2" --pages 1000 --rate "$cross_rate" \
            --duration-secs "$cross_secs" --pause-before-secs 2 --pause-after-secs 3 --syscalls "${costs[@]}" >"$lt_work/cross.out" 2>"$lt_work/cross.err" &
        lg=$!
        until grep -q pausing "$lt_work/cross.err" 2>/dev/null; do
            kill -0 "$lg" 2>/dev/null || { cat "$lt_work/cross.err" >&2; exit 1; }
            sleep 0.1
        done
        rcli() { "${REDIS_CLI:-redis-cli}" -p "$lt_redis_port" "$@"; }
        rcli config resetstat >/dev/null
        mem_before="$(rcli info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
        # Read when the last call is answered, before the 1,000 pages close: what the calls
        # cost, not the pages' closing (counted apart, below).
        until grep -q "calls: finished" "$lt_work/cross.err" 2>/dev/null; do
            kill -0 "$lg" 2>/dev/null || { cat "$lt_work/cross.err" >&2; exit 1; }
            sleep 0.1
        done
        res="$(head -1 "$lt_work/cross.out")"
        rcli info commandstats >"$lt_work/stats.txt"
        # Every call of the run is finished and still retained (timeout + 5 min): the growth
        # is what finished calls cost. Subscriptions: both nodes' sharded channels.
        mem_after="$(rcli info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
        channels="$(rcli pubsub shardchannels 'tm:*' | grep -c . || true)"
        wait "$lg"
        rcli info commandstats >"$lt_work/stats-closed.txt"
        res="$(python3 - "$res" "$lt_work/stats.txt" "$mem_before" "$mem_after" "$channels" "$lt_work/stats-closed.txt" <<'PY'
import json, re, sys
line = json.loads(sys.argv[1])
sent = line["sent"]
def counts(path):
    out = {}
    for l in open(path):
        m = re.match(r"cmdstat_([a-z|]+):calls=(\d+)", l.strip())
        if m and m.group(1) not in ("info", "config|resetstat", "pubsub|shardchannels"):
            out[m.group(1)] = int(m.group(2))
    return out
calls = counts(sys.argv[2])
per = {k: round(v / sent, 3) for k, v in calls.items()}
# The 1,000 pages closing after the calls (not a call's cost): commands per page.
closed = counts(sys.argv[6])
line["redis_commands_per_page_closed"] = round((sum(closed.values()) - sum(calls.values())) / 1000, 1)
line["redis_commands_per_call"] = per
line["redis_commands_per_call_total"] = round(sum(per.values()), 3)
line["redis_scripts_per_call"] = round(per.get("evalsha", 0) + per.get("eval", 0), 3)
line["redis_bytes_per_finished_call"] = round((int(sys.argv[4]) - int(sys.argv[3])) / sent)
line["sharded_channels_two_nodes_1000_pages"] = int(sys.argv[5])
print(json.dumps(line))
PY
)"
        echo "$res"
        record cross-rate "$res"
        echo "== calls across nodes: $sweep" >&2
        sweep_rates "$node1" "$node2" "$out/cross-node.jsonl" "${costs[@]}"
        while read -r l; do record cross "$l"; done <"$out/cross-node.jsonl"
        stop_all
        ;;
    finished-calls)
        lt_write_config memory
        lt_start_node finished-calls
        quiet_machine
        echo "== finished calls on the memory broker: ${FINISHED_RATE:-2000}/s for ${FINISHED_SECS:-20} s" >&2
        loadgen calls --url "$lt_node_url" --pages 1000 --rate "${FINISHED_RATE:-2000}" \
            --duration-secs "${FINISHED_SECS:-20}" --pause-before-secs 2 --gateway-pid "$lt_node_pid" \
            >"$lt_work/finished.out" 2>"$lt_work/finished.err" &
        lg=$!
        until grep -q pausing "$lt_work/finished.err" 2>/dev/null; do
            kill -0 "$lg" 2>/dev/null || { cat "$lt_work/finished.err" >&2; exit 1; }
            sleep 0.1
        done
        vm_rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$lt_node_pid/status"; }
        rss_before="$(vm_rss)"
        wait "$lg"
        # The last answers are in; the node settles (no call is pending any more).
        sleep 3
        rss_after="$(vm_rss)"
        res="$(python3 - "$(head -1 "$lt_work/finished.out")" "$rss_before" "$rss_after" <<'PY'
import json, sys
line = json.loads(sys.argv[1])
before, after = int(sys.argv[2]), int(sys.argv[3])
line.update({"broker": "memory", "rss_before_kib": before, "rss_after_kib": after,
             "rss_bytes_per_finished_call": round((after - before) * 1024 / line["sent"])})
print(json.dumps(line))
PY
)"
        echo "$res"
        record finished-calls "$res"
        stop_all
        ;;
    reloads)
        # One open conversation, RELOADS (3000) reloads with a RELOAD_MANIFEST_BYTES (10240)
        # manifest each: what a gone page load leaves behind, on the memory broker (the
        # node's RSS) and on Redis (its used_memory, and the node's RSS).
        reload_args=(--reloads "${RELOADS:-3000}" --manifest-bytes "${RELOAD_MANIFEST_BYTES:-10240}")
        lt_write_config memory
        lt_start_node reloads-memory
        quiet_machine
        echo "== reloads on the memory broker" >&2
        res="$(loadgen reloads --url "$lt_node_url" "${reload_args[@]}" --gateway-pid "$lt_node_pid" | sed -n 1p)"
        res="$(python3 -c 'import json,sys; l=json.loads(sys.argv[1]); l["broker"]="memory"; print(json.dumps(l))' "$res")"
        echo "$res"
        record reloads "$res"
        stop_all
        lt_start_redis
        lt_write_config redis
        lt_start_node reloads-redis
        rcli() { "${REDIS_CLI:-redis-cli}" -p "$lt_redis_port" "$@"; }
        used() { rcli info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'; }
        quiet_machine
        echo "== reloads on Redis" >&2
        mem_before="$(used)"
        res="$(loadgen reloads --url "$lt_node_url" "${reload_args[@]}" --gateway-pid "$lt_node_pid" | sed -n 1p)"
        mem_after="$(used)"
        res="$(python3 -c 'import json,sys; l=json.loads(sys.argv[1]); l["broker"]="redis"; l["redis_bytes_per_reload"]=round((int(sys.argv[3])-int(sys.argv[2]))/l["reloads"]); print(json.dumps(l))' \
            "$res" "$mem_before" "$mem_after")"
        echo "$res"
        record reloads "$res"
        stop_all
        ;;
    doors)
        lt_start_redis
        lt_write_config redis
        lt_start_node 1; node1="$lt_node_url"; pid1="$lt_node_pid"
        lt_start_node 2; node2="$lt_node_url"; pid2="$lt_node_pid"
        costs=(--gateway-pid "$pid1" --agent-gateway-pid "$pid2" --redis-pid "$lt_redis_pid")
        for door in "api" "api --http2" "mcp" "mcp --http2"; do
            quiet_machine
            echo "== cross-node calls through $door at ${DOORS_RATE:-2000}/s" >&2
            # shellcheck disable=SC2086 # "$door" is the door and its HTTP flag
            res="$(loadgen calls --url "$node1" --agent-url "$node2" --pages 1000 --rate "${DOORS_RATE:-2000}" \
                --duration-secs "${DOORS_SECS:-15}" --door $door --syscalls "${costs[@]}" | sed -n 1p)"
            echo "$res"
            record doors "$res"
        done
        stop_all
        ;;
    tasks)
        lt_start_redis
        lt_write_config redis
        lt_start_node tasks
        venv="$root/target/bench/venv"
        [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
        "$venv/bin/python" -c 'import websockets' 2>/dev/null ||
            "$venv/bin/pip" install --quiet --disable-pip-version-check websockets==17.4
        quiet_machine
        echo "== tasks: what an MCP task costs in Redis" >&2
        res="$("$venv/bin/python" "$root/load-tests/mcp-task-cost.py" --url "$lt_node_url" --tenant bench \
            --api-key "$lt_api_key" --origin "$lt_origin" --count "${TASK_CALLS:-200}" \
            --redis-cli "${REDIS_CLI:-redis-cli} -p $lt_redis_port")"
        echo "$res"
        record tasks "$res"
        stop_all
        ;;
    handshakes)
        lt_write_config memory
        lt_start_node handshakes
        quiet_machine
        echo "== handshakes: $handshake_pages pages, $handshake_concurrency at a time" >&2
        listen_drops() { nstat -az TcpExtListenOverflows TcpExtListenDrops 2>/dev/null | awk '/TcpExt/ {n += $2} END {print n + 0}'; }
        drops_before="$(listen_drops)"
        res="$(loadgen handshakes --url "$lt_node_url" --pages "$handshake_pages" \
            --concurrency "$handshake_concurrency" --gateway-pid "$lt_node_pid" | sed -n 1p)"
        drops_after="$(listen_drops)"
        backlog="$(ss -ltnH "sport = :${lt_node_url##*:}" | awk '{print $3}' | head -1)"
        res="$(python3 -c 'import json,sys; l=json.loads(sys.argv[1]); l["listen_drops"]=int(sys.argv[3])-int(sys.argv[2]); l["listen_backlog"]=int(sys.argv[4] or 0); print(json.dumps(l))' \
            "$res" "$drops_before" "$drops_after" "${backlog:-0}")"
        echo "$res"
        record handshakes "$res"
        stop_all
        ;;
    storm)
        lt_start_redis
        # The drain timeout in production by default: node 1 closes its pages, then exits.
        DRAIN_TIMEOUT_MS="${STORM_DRAIN_TIMEOUT_MS:-10000}" lt_write_config redis
        lt_start_node 1; node1="$lt_node_url"; node1_pid="$lt_node_pid"
        lt_start_node 2; node2="$lt_node_url"
        quiet_machine
        echo "== storm: $storm_pages pages on node 1, $storm_rate calls/s through node 2, node 1 drained" >&2
        res="$(loadgen storm --url "$node1" --fallback-url "$node2" --drain-pid "$node1_pid" \
            --pages "$storm_pages" --rate "$storm_rate" | sed -n 1p)" || true
        [[ -n "$res" ]] || { echo "bench.sh: the storm did not report" >&2; exit 1; }
        # What the draining node could not record: each line is a page release or an event
        # (page.disconnected, call outcomes) that never reached Redis.
        wait "$node1_pid" 2>/dev/null || true
        lost="$(grep -c -e 'event not emitted' -e 'page release not recorded' "$lt_work/node-1.log" || true)"
        res="$(python3 -c 'import json,sys; l=json.loads(sys.argv[1]); l["draining_node_unrecorded"]=int(sys.argv[2]); print(json.dumps(l))' "$res" "${lost:-0}")"
        echo "$res"
        record storm "$res"
        stop_all
        ;;
    reference)
        for v in REFERENCE_URL REFERENCE_APP_ID REFERENCE_KEY REFERENCE_SECRET; do
            [[ -n "${!v:-}" ]] || { echo "bench.sh: the reference stage needs $v: start a Pusher-protocol server first (docs/benchmarks.md, \"Against another server\")" >&2; exit 2; }
        done
        echo_key="bench-echo-$(lt_random_hex 4)"
        LT_TENANT_EXTRA="$(printf 'pusher_key = "%s"\npusher_secret = "%s"' "$echo_key" "$(lt_random_hex 16)")" \
            lt_write_config memory
        lt_start_node reference
        ref() { TOOLMARK_BENCH_PUSHER_SECRET="$REFERENCE_SECRET" "$lt_loadgen_bin" "$@"; }
        # REFERENCE_CMD starts the other server for this stage and stops it after, as our node
        # is: every round then measures a fresh process (a server's memory per socket is read
        # as the growth of its RSS, which an allocator does not give back between rounds).
        reference_pid="${REFERENCE_PID:-}"
        if [[ -n "${REFERENCE_CMD:-}" ]]; then
            # shellcheck disable=SC2086 # a command line, split into its words on purpose
            $REFERENCE_CMD >"$lt_work/reference.log" 2>&1 &
            reference_pid=$!
            lt_pids+=("$reference_pid")
            ref_addr="${REFERENCE_URL#http://}"; ref_addr="${ref_addr%%/*}"
            for _ in $(seq 100); do
                (exec 3<>"/dev/tcp/${ref_addr%:*}/${ref_addr##*:}") 2>/dev/null && break
                kill -0 "$reference_pid" 2>/dev/null || { cat "$lt_work/reference.log" >&2; echo "bench.sh: REFERENCE_CMD exited" >&2; exit 1; }
                sleep 0.1
            done
        fi
        # Its process, when known: its CPU per event and per set-up, its memory per socket.
        ref_pid=()
        [[ -n "$reference_pid" ]] && ref_pid=(--server-pid "$reference_pid")
        quiet_machine
        echo "== reference: our calls at $reference_rate/s on one node" >&2
        res="$(loadgen calls --url "$lt_node_url" --pages 1000 --rate "$reference_rate" --duration-secs "$reference_secs" --gateway-pid "$lt_node_pid" | sed -n 1p)"
        echo "$res"; record reference-calls "$res"
        quiet_machine
        echo "== reference: its publish→deliver at $reference_rate/s" >&2
        res="$(ref pusher-publish --url "$REFERENCE_URL" --key "$REFERENCE_KEY" --app-id "$REFERENCE_APP_ID" "${ref_pid[@]}" \
            --channels 1000 --rate "$reference_rate" --duration-secs "$reference_secs" | sed -n 1p)"
        echo "$res"; record reference-publish "$res"
        quiet_machine
        echo "== reference: handshakes, $handshake_pages sockets, $handshake_concurrency at a time" >&2
        res="$(ref pusher-handshakes --url "$REFERENCE_URL" --key "$REFERENCE_KEY" "${ref_pid[@]}" \
            --connections "$handshake_pages" --concurrency "$handshake_concurrency" | sed -n 1p)"
        echo "$res"; record reference-handshakes "$res"
        quiet_machine
        res="$(ref pusher-handshakes --url "$lt_node_url" --key "$echo_key" --origin "$lt_origin" --server-pid "$lt_node_pid" \
            --connections "$handshake_pages" --concurrency "$handshake_concurrency" | sed -n 1p)"
        echo "$res"; record reference-echo-handshakes "$res"
        quiet_machine
        res="$(loadgen handshakes --url "$lt_node_url" --pages "$handshake_pages" \
            --concurrency "$handshake_concurrency" --gateway-pid "$lt_node_pid" | sed -n 1p)"
        echo "$res"; record reference-page-handshakes "$res"
        stop_all
        ;;
    *) echo "bench.sh: unknown stage $stage" >&2; exit 2 ;;
    esac
done

series=()
[[ -s "$out/single-node.jsonl" ]] && series+=(--series "one node=$out/single-node.jsonl")
[[ -s "$out/cross-node.jsonl" ]] && series+=(--series "two nodes (Redis)=$out/cross-node.jsonl")
if (( ${#series[@]} )); then
    "$lt_loadgen_bin" chart "${series[@]}" --limit-ms 20 --output "$chart" \
        --title "Toolmark Gateway: call round trip against call rate"
    echo "bench.sh: chart written to ${chart#"$root"/}" >&2
fi
echo "bench.sh: report in ${report#"$root"/}" >&2
