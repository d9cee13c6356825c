#!/usr/bin/env bash
# `make admin-propagation`: how long a change made through the admin API of node 1 takes to
# hold on node 3 (three release nodes on one Redis). Each of CHANGES (1000) changes adds an API
# key through node 1 and polls node 3's agent API with that key until it is accepted; the key
# before it is then deleted, so the tenant stays the size of a real one. Prints one JSON line
# (p50, p90, p99, max in ms), also appended to $OUT/admin-propagation.jsonl (OUT default
# docs/img/bench). Beside it, the admin write's own latency (the POST that adds the key).
# STORE picks admin.store: broker (default), postgres (a PostgreSQL cluster made here with
# initdb, run as the `postgres` user when this runs as root) or sqlite (one node: a SQLite file
# is for one node, so node 3 is node 1).
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
store="${STORE:-broker}"
store_url="broker"
nodes=(1 2 3)
case "$store" in
    broker) ;;
    sqlite)
        store_url="sqlite://$lt_work/catalog.db"
        nodes=(1)
        ;;
    postgres)
        pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
        [[ -x "$pg_bin/initdb" ]] || { echo "PostgreSQL is not installed: apt-get install -y postgresql" >&2; exit 1; }
        pg_dir="$lt_work/pg"
        mkdir -p "$pg_dir"
        as_pg=()
        if [[ "$(id -u)" == 0 ]]; then
            # PostgreSQL refuses root: its own user runs it, and needs to reach the folder.
            chmod o+x "$lt_work"
            chown postgres "$pg_dir"
            as_pg=(runuser -u postgres --)
        fi
        "${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U toolmark --auth=trust --no-sync >/dev/null
        pg_port=$((20000 + RANDOM % 30000))
        "${as_pg[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -p "$pg_port" -k "$pg_dir" \
            -c listen_addresses=127.0.0.1 >"$lt_work/postgres.log" 2>&1 &
        lt_pids+=($!)
        for _ in $(seq 100); do
            "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break
            sleep 0.1
        done
        store_url="postgres://toolmark@127.0.0.1:$pg_port/postgres"
        ;;
    *) echo "STORE=$store: use broker, postgres or sqlite" >&2; exit 2 ;;
esac
admin_key="tma_bench_$(lt_random_hex 16)"
admin_hash="$(printf %s "$admin_key" | sha256sum | cut -d' ' -f1)"
cat >>"$lt_work/gateway.toml" <<TOML

[admin]
api_keys = ["sha256:$admin_hash"]
encryption_key = "base64:$(head -c 32 /dev/urandom | base64)"
store = "$store_url"
TOML

admin_urls=()
for n in "${nodes[@]}"; do
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

python3 - "${admin_urls[0]}" "${node_3:-$node_1}" "$admin_key" "$changes" "$(git -C "$root" describe --always --dirty)" "$store" "${#nodes[@]}" <<'PY' | tee -a "$out/admin-propagation.jsonl"
import http.client, json, sys, time, urllib.parse
admin_url, node3_url, admin_key, changes, commit, store, nodes = sys.argv[1:8]
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
writes = []
for i in range(changes):
    t0 = time.perf_counter()
    s, k = call(admin, "POST", "/admin/v1/tenants/propagation/api-keys", admin_key, {})
    assert s == 201, (s, k)
    writes.append((time.perf_counter() - t0) * 1000)
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
writes.sort()
q = lambda xs, p: round(xs[min(len(xs) - 1, int(p * len(xs)))], 2)
print(json.dumps({"stage": "admin-propagation", "commit": commit,
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "store": store, "changes": changes, "nodes": int(nodes),
                  "p50_ms": q(lat, 0.5), "p90_ms": q(lat, 0.9), "p99_ms": q(lat, 0.99),
                  "max_ms": round(lat[-1], 2),
                  "write_p50_ms": q(writes, 0.5), "write_p99_ms": q(writes, 0.99)}))
PY
