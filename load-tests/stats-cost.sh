#!/usr/bin/env bash
# What the console's polling costs: one gateway node on redis-server holding PAGES idle pages
# (default 19,000) of the tenant `bench`; the admin stats polled back to back for SECS seconds
# (default 20), alternating GET /admin/v1/tenants/bench/stats and GET /admin/v1/stats. Prints
# one JSON line: requests, latency p50/p99 (ms), and the gateway's CPU time per request (its CPU
# over the polling window, less its CPU over an idle window of the same length, per request).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/load-tests/lib.sh"
lt_init
lt_build
lt_raise_nofile
pages="${PAGES:-19000}"
secs="${SECS:-20}"
admin_key="tma_stats_$(lt_random_hex 16)"
lt_start_redis
lt_write_config redis
cat >>"$lt_work/gateway.toml" <<TOML

[admin]
api_keys = ["sha256:$(printf %s "$admin_key" | sha256sum | cut -d' ' -f1)"]
encryption_key = "base64:$(head -c 32 /dev/urandom | base64)"
TOML
admin_port="$(lt_free_port)"
RUST_LOG=warn "$lt_gateway_bin" --config "$lt_work/gateway.toml" --listen 127.0.0.1:0 \
    --admin-listen "127.0.0.1:$admin_port" --node-id node-1 >"$lt_work/node.log" 2>&1 &
pid=$!
lt_pids+=("$pid")
for _ in $(seq 100); do grep -q 'admin listening on' "$lt_work/node.log" && break; sleep 0.1; done
url="$(grep -m1 -o 'toolmark-gateway listening on http://[0-9.:]*' "$lt_work/node.log")"
url="${url#toolmark-gateway listening on }"
"$lt_loadgen_bin" idle --url "$url" --token-secret "$lt_token_secret" --origin "$lt_origin" \
    --pages "$pages" --processes 2 --cpu-secs 1 --hold-secs $((secs * 2 + 30)) \
    --gateway-pid "$pid" >"$lt_work/idle.json" 2>"$lt_work/idle.log" &
lt_pids+=("$!")
python3 - "$admin_port" "$admin_key" "$pid" "$pages" "$secs" <<'PY'
import http.client, json, os, sys, time
port, key, pid, pages, secs = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
hz = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
def get(c, path):
    c.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    r = c.getresponse(); body = r.read()
    assert r.status == 200, (r.status, body)
    return json.loads(body)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
deadline = time.time() + 600
while get(c, "/admin/v1/tenants/bench/stats")["cluster"]["connections"] < pages:
    assert time.time() < deadline, "the pages did not connect"
    time.sleep(1)
time.sleep(5)
c0 = cpu(); time.sleep(secs); idle = cpu() - c0
lat = []; c0 = cpu(); end = time.time() + secs; n = 0
while time.time() < end:
    path = "/admin/v1/tenants/bench/stats" if n % 2 == 0 else "/admin/v1/stats"
    t = time.perf_counter(); get(c, path); lat.append((time.perf_counter() - t) * 1000); n += 1
busy = cpu() - c0
lat.sort()
print(json.dumps({"pages": pages, "requests": n, "p50_ms": round(lat[len(lat) // 2], 3),
    "p99_ms": round(lat[int(len(lat) * 0.99)], 3), "idle_cpu_s": round(idle, 2), "polling_cpu_s": round(busy, 2),
    "cpu_us_per_request": round((busy - idle) / n * 1e6, 1)}))
PY
