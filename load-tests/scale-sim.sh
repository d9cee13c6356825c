#!/usr/bin/env bash
# `make scale-sim`: the simulation beside the model of docs/scaling.md, on this machine. A
# six-node Redis Cluster (three masters, three replicas), GATEWAYS (10) gateway nodes on it, each
# holding PAGES (1000) pages of a load generator of its own whose agent calls go through the next
# node (every call crosses nodes), RATE (1000) calls/s in all for SECS (30). Reports per master:
# the commands it executed per second (those scripts run inside included, as INFO counts them),
# the scripts per second, its sharded channels, its memory, and the slots it serves; and in all:
# calls per second, their latency, and the commands per call; and the scripts per call as the
# nodes' metrics count them (the tenant's rate beside a call or waited for). One JSON line in
# $OUT/scale.jsonl (OUT default docs/img/bench).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=load-tests/lib.sh
source "$root/load-tests/lib.sh"

gateways="${GATEWAYS:-10}"
pages="${PAGES:-1000}"
rate="${RATE:-1000}"
secs="${SECS:-30}"
out="${OUT:-$root/docs/img/bench}"
redis_cli="${REDIS_CLI:-redis-cli}"

lt_raise_nofile
lt_build
mkdir -p "$out"
lt_init
lt_start_cluster
lt_write_config cluster
# Redis memory of all masters and replicas, and network bytes in + out of all servers.
redis_sum() {
    local p t=0
    for p in "${lt_cluster_ports[@]}"; do
        t=$(( t + $("$redis_cli" -p "$p" info "$1" | awk -F: -v k="$2" '$1 == k {print $2 + 0}' | tr -d '\r') ))
    done
    echo "$t"
}
memory_empty="$(redis_sum memory used_memory)"
urls=()
node_pids=()
for i in $(seq "$gateways"); do
    lt_start_node "$i"
    urls+=("$lt_node_url")
    node_pids+=("$lt_node_pid")
done
# CPU seconds used so far by the gateway nodes (utime + stime of /proc/<pid>/stat).
nodes_cpu() {
    local pid t=0 tick
    tick="$(getconf CLK_TCK)"
    for pid in "${node_pids[@]}"; do
        t=$(( t + $(awk '{print $14 + $15}' "/proc/$pid/stat") ))
    done
    python3 -c "print($t / $tick)"
}
# CPU seconds used so far by the Redis servers (user + sys, from INFO cpu).
redis_cpu() {
    local p t="0"
    for p in "${lt_cluster_ports[@]}"; do
        t="$t + $("$redis_cli" -p "$p" info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {print s + 0}')"
    done
    python3 -c "print($t)"
}
per=$(( rate / gateways ))
lgs=()
for (( i = 0; i < gateways; i++ )); do
    next=$(( (i + 1) % gateways ))
    TOOLMARK_BENCH_API_KEY="$lt_api_key" TOOLMARK_BENCH_TOKEN_SECRET="$lt_token_secret" \
        "$lt_loadgen_bin" calls --url "${urls[$i]}" --agent-url "${urls[$next]}" \
        --pages "$pages" --rate "$per" --duration-secs "$secs" --pause-before-secs 15 \
        --user-prefix "g${i}u" --source-addrs 4 --ramp-per-sec 500 \
        >"$lt_work/sim-$i.out" 2>"$lt_work/sim-$i.err" &
    lgs+=($!)
done
echo "scale-sim: $gateways nodes × $pages pages, waiting for every load generator" >&2
for (( i = 0; i < gateways; i++ )); do
    until grep -q pausing "$lt_work/sim-$i.err" 2>/dev/null; do
        kill -0 "${lgs[$i]}" 2>/dev/null || { cat "$lt_work/sim-$i.err" >&2; exit 1; }
        sleep 0.2
    done
done
memory_pages="$(redis_sum memory used_memory)"
for p in "${lt_cluster_ports[@]}"; do "$redis_cli" -p "$p" config resetstat >/dev/null; done
net_before=$(( $(redis_sum stats total_net_input_bytes) + $(redis_sum stats total_net_output_bytes) ))
started="$(date +%s.%N)"
cpu_nodes_before="$(nodes_cpu)"; cpu_redis_before="$(redis_cpu)"
for pid in "${lgs[@]}"; do wait "$pid"; done
ended="$(date +%s.%N)"
cpu_nodes="$(python3 -c "print($(nodes_cpu) - $cpu_nodes_before)")"
cpu_redis="$(python3 -c "print($(redis_cpu) - $cpu_redis_before)")"
net=$(( $(redis_sum stats total_net_input_bytes) + $(redis_sum stats total_net_output_bytes) - net_before ))
memory_calls="$(redis_sum memory used_memory)"
# Each node's metrics: how many of each script it ran (the call's rate: `gcra` beside a call,
# `gcra_before_call` when a call waited for it).
for (( i = 0; i < gateways; i++ )); do
    python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1] + '/metrics').read().decode())" \
        "${urls[$i]}" >"$lt_work/metrics-$i.txt"
done
for p in "${lt_cluster_ports[@]}"; do
    {
        echo "port:$p"
        "$redis_cli" -p "$p" info replication | grep '^role:'
        "$redis_cli" -p "$p" info memory | grep '^used_memory:'
        echo "shardchannels:$("$redis_cli" -p "$p" pubsub shardchannels '*' | grep -c . || true)"
        # Fields 9… of this node's line are its slot ranges, `a-b` or a single slot.
        echo "slots:$("$redis_cli" -p "$p" cluster nodes | grep myself | awk '{n=0; for (i=9; i<=NF; i++) { k=split($i, r, "-"); n += (k == 1 ? 1 : r[2] - r[1] + 1) } print n}')"
        "$redis_cli" -p "$p" info commandstats | grep '^cmdstat_'
    } >"$lt_work/shard-$p.txt"
done
res="$(python3 - "$lt_work" "$gateways" "$pages" "$rate" "$started" "$ended" "$cpu_nodes" "$cpu_redis" \
    "$memory_empty" "$memory_pages" "$memory_calls" "$net" "$secs" <<'PY'
import glob, json, re, sys
work, gateways, pages, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
window = float(sys.argv[6]) - float(sys.argv[5])
secs = float(sys.argv[13])
cpu_nodes, cpu_redis = float(sys.argv[7]), float(sys.argv[8])
mem_empty, mem_pages, mem_calls, net = (int(a) for a in sys.argv[9:13])
runs = [json.loads(open(f).readline()) for f in sorted(glob.glob(f"{work}/sim-*.out"))]
sent = sum(r["sent"] for r in runs)
ok = sum(r.get("ok", 0) for r in runs)
p99 = max(r["p99_us"] for r in runs) / 1000
shards = []
per_command = {}
for f in sorted(glob.glob(f"{work}/shard-*.txt")):
    d = {"commands": 0, "scripts": 0, "by": {}}
    for l in open(f):
        l = l.strip()
        if l.startswith("cmdstat_"):
            m = re.match(r"cmdstat_([a-z|]+):calls=(\d+)", l)
            if m and m.group(1) not in ("info", "config|resetstat"):
                d["commands"] += int(m.group(2))
                d["by"][m.group(1)] = int(m.group(2))
                if m.group(1) in ("evalsha", "eval"):
                    d["scripts"] += int(m.group(2))
        elif ":" in l:
            k, v = l.split(":", 1)
            d[k] = v
    if d.get("role") != "master":
        continue
    for k, v in d["by"].items():
        per_command[k] = per_command.get(k, 0) + v
    shards.append({
        "port": int(d["port"]),
        "slots": int(d.get("slots", "0") or 0),
        # Per call of the whole run; and per second of the calls' span (the pause before the
        # first call, with heartbeats and probes only, is inside the window).
        "commands_per_call": round(d["commands"] / max(sent, 1), 2),
        "scripts_per_call": round(d["scripts"] / max(sent, 1), 3),
        "commands_per_sec": round(d["commands"] / secs),
        "shardchannels": int(d["shardchannels"]),
        "used_memory_mb": round(int(d["used_memory"]) / 1e6, 1),
    })
total = sum(s["commands_per_call"] for s in shards)
node_scripts = {}
for f in glob.glob(f"{work}/metrics-*.txt"):
    for l in open(f):
        m = re.match(r'toolmark_redis_script_duration_seconds_count\{[^}]*script="([^"]+)"[^}]*\}\s+(\S+)', l)
        if m:
            node_scripts[m.group(1)] = node_scripts.get(m.group(1), 0) + float(m.group(2))
print(json.dumps({
    "gateways": gateways, "pages": gateways * pages, "rate": rate, "window_secs": round(window, 1),
    "calls_sent": sent, "calls_ok": ok, "worst_node_p99_ms": p99,
    "calls_per_sec": round(sent / secs), "commands_per_call": round(total, 2),
    # The pause before the first call is inside the window: idle cost is part of these.
    "gateway_cpu_us_per_call": round(cpu_nodes * 1e6 / max(sent, 1)),
    "redis_cpu_us_per_call_all_six": round(cpu_redis * 1e6 / max(sent, 1)),
    # Masters and replicas both hold the data: halve for one copy.
    "redis_bytes_per_page_two_copies": round((mem_pages - mem_empty) / (gateways * pages)),
    "redis_bytes_per_finished_call_two_copies": round((mem_calls - mem_pages) / max(sent, 1)),
    "redis_network_bytes_per_call_all_six": round(net / max(sent, 1)),
    "shards": shards,
    "masters_commands_per_call": {k: round(v / max(sent, 1), 3) for k, v in sorted(per_command.items()) if v / max(sent, 1) >= 0.01},
    # The scripts as the nodes ran them, pages' connections and departures included.
    "node_scripts_per_call": {k: round(v / max(sent, 1), 3) for k, v in sorted(node_scripts.items()) if v / max(sent, 1) >= 0.001},
}))
PY
)"
echo "$res"
python3 - "$res" "$out/scale.jsonl" "$(git -C "$root" describe --always --dirty)" <<'PY'
import json, os, sys, datetime
line = json.loads(sys.argv[1])
mem_kib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
line.update({
    "commit": sys.argv[3],
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "cores": os.cpu_count(),
    "mem_gib": round(mem_kib / 1048576, 1),
})
with open(sys.argv[2], "a") as f:
    f.write(json.dumps(line, sort_keys=True) + "\n")
PY
echo "scale-sim: appended to ${out#"$root"/}/scale.jsonl" >&2
