#!/usr/bin/env bash
# `make admin-propagation`: how long a change made through the admin API of node 1 takes to
# hold on node 3 (three release nodes on one Redis). Each of CHANGES (1000) changes adds an API
# key through node 1 and polls node 3's agent API with that key until it is accepted; the key
# before it is then deleted, so the tenant stays the size of a real one. Prints one JSON line
# (p50, p90, p99, max in ms), also appended to $OUT/admin-propagation.jsonl (OUT default
# docs/img/bench).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=load-tests/lib.sh
source "$root/load-tests/lib.sh"
lt_init
lt_build
changes="${CHANGES:-1000}"
out="${OUT:-$root/docs/img/bench}"
mkdir -p "$out"

lt_start_redis
lt_write_config redis
admin_key="tma_bench_$(lt_random_hex 16)"
admin_hash="$(printf %s "$admin_key" | sha256sum | cut -d' ' -f1)"
cat >>"$lt_work/gateway.toml" <<TOML

[admin]
api_keys = ["sha256:$admin_hash"]
encryption_key = "base64:$(head -c 32 /dev/urandom | base64)"
TOML

admin_urls=()
for n in 1 2 3; do
    log="$lt_work/admin-node-$n.log"
    RUST_LOG="${GATEWAY_LOG:-info}" "$lt_gateway_bin" --config "$lt_work/gateway.toml" \
        --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --node-id "node-$n" >"$log" 2>&1 &
    lt_pids+=($!)
    line=""
    for _ in $(seq 100); do
        line="$(grep -m1 -o 'admin listening on http://[0-9.:]*' "$log" || true)"
        [[ -n "$line" ]] && break
        sleep 0.1
    done
    [[ -n "$line" ]] || { cat "$log" >&2; echo "node $n did not start" >&2; exit 1; }
    admin_urls+=("${line#admin listening on }")
    eval "node_$n=$(grep -m1 -o ' listening on http://[0-9.:]*' "$log" | head -1 | sed 's/ listening on //')"
done

python3 - "${admin_urls[0]}" "${node_3:?}" "$admin_key" "$changes" "$(git -C "$root" describe --always --dirty)" <<'PY' | tee -a "$out/admin-propagation.jsonl"
import http.client, json, sys, time, urllib.parse
admin_url, node3_url, admin_key, changes, commit = sys.argv[1:6]
changes = int(changes)

def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=10)

admin = conn(admin_url)
node3 = conn(node3_url)

def call(c, method, path, key, body=None):
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    return r.status, (json.loads(data) if data else None)

s, created = call(admin, "POST", "/admin/v1/tenants", admin_key,
                  {"id": "propagation", "allowedOrigins": ["http://loadgen.test"]})
assert s == 201, (s, created)
previous = created["secrets"]["apiKeyId"]
lat = []
for i in range(changes):
    t0 = time.perf_counter()
    s, k = call(admin, "POST", "/admin/v1/tenants/propagation/api-keys", admin_key, {})
    assert s == 201, (s, k)
    while True:
        s, _ = call(node3, "GET", "/v1/tenants/propagation/users/u/conversations/c", k["apiKey"])
        if s == 200:
            break
        assert s == 401, s
        if time.perf_counter() - t0 > 10:
            raise SystemExit(f"change {i} not seen on node 3 within 10 s")
    lat.append((time.perf_counter() - t0) * 1000)
    s, _ = call(admin, "DELETE", f"/admin/v1/tenants/propagation/api-keys/{previous}", admin_key)
    assert s == 204, s
    previous = k["apiKeyId"]
lat.sort()
q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 2)
print(json.dumps({"stage": "admin-propagation", "commit": commit,
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "changes": changes, "nodes": 3, "p50_ms": q(0.5), "p90_ms": q(0.9),
                  "p99_ms": q(0.99), "max_ms": round(lat[-1], 2)}))
PY
