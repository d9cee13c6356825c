# Shared pieces of the load-test runners (sourced, not run): a work directory cleaned on exit,
# secrets, a bench tenant config, redis-server and gateway nodes on ephemeral loopback ports.
# The sourcing script sets `root` and calls lt_init first.

lt_init() {
    lt_work="$(mktemp -d)"
    lt_pids=()
    trap lt_cleanup EXIT
    lt_origin="http://loadgen.test"
    lt_api_key="tmk_bench_$(lt_random_hex 24)"
    lt_token_secret="$(lt_random_hex 32)"
    lt_gateway_bin="${CARGO_TARGET_DIR:-$root/target}/release/toolmark-gateway"
    # The load generator may come from another build than the gateway (bench-compare drives both
    # builds' gateways with the working tree's load generator).
    lt_loadgen_bin="${LOADGEN_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/toolmark-loadgen}"
}

lt_cleanup() {
    local p
    for p in "${lt_pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$lt_work"
}

lt_random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
lt_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Raises the open-file soft limit toward 20,000 (or the hard limit) for this shell's children.
lt_raise_nofile() {
    ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
}

lt_build() {
    if [[ -z "${SKIP_BUILD:-}" ]]; then
        (cd "$root" && "${CARGO:-cargo}" build --release --locked -p toolmark-gateway -p toolmark-loadgen)
    fi
}

# Starts redis-server (persistence off) on a free port; sets lt_redis_port.
lt_start_redis() {
    local redis_server="${REDIS_SERVER:-redis-server}" redis_cli="${REDIS_CLI:-redis-cli}"
    command -v "$redis_server" >/dev/null || { echo "redis-server missing (apt-get install -y redis-server)" >&2; exit 1; }
    lt_redis_port="$(lt_free_port)"
    "$redis_server" --port "$lt_redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$lt_work" >"$lt_work/redis.log" 2>&1 &
    lt_redis_pid=$!
    lt_pids+=("$lt_redis_pid")
    local _
    for _ in $(seq 50); do "$redis_cli" -p "$lt_redis_port" ping >/dev/null 2>&1 && return; sleep 0.1; done
    cat "$lt_work/redis.log" >&2; echo "redis-server did not start" >&2; exit 1
}

# Starts six redis-servers (persistence off) joined as a cluster of three masters with one
# replica each; sets lt_cluster_ports (all six) and lt_cluster_url.
lt_start_cluster() {
    local redis_server="${REDIS_SERVER:-redis-server}" redis_cli="${REDIS_CLI:-redis-cli}" p _ hosts=()
    command -v "$redis_server" >/dev/null || { echo "redis-server missing (apt-get install -y redis-server)" >&2; exit 1; }
    lt_cluster_ports=()
    for _ in $(seq 6); do
        # Below 55536: a cluster node's bus port is its port + 10000.
        p="$(python3 -c 'import random; print(random.randint(20000, 55000))')"
        mkdir -p "$lt_work/cluster-$p"
        "$redis_server" --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$lt_work/cluster-$p" \
            --cluster-enabled yes --cluster-node-timeout 5000 >"$lt_work/cluster-$p.log" 2>&1 &
        lt_pids+=($!)
        lt_cluster_ports+=("$p")
        hosts+=("127.0.0.1:$p")
    done
    for p in "${lt_cluster_ports[@]}"; do
        for _ in $(seq 50); do "$redis_cli" -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
    done
    "$redis_cli" --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes >"$lt_work/cluster-create.log" 2>&1 \
        || { cat "$lt_work/cluster-create.log" >&2; exit 1; }
    for _ in $(seq 100); do
        local ok=1
        for p in "${lt_cluster_ports[@]}"; do
            "$redis_cli" -p "$p" cluster info 2>/dev/null | grep -q cluster_state:ok || ok=0
        done
        (( ok )) && break
        sleep 0.1
    done
    lt_cluster_url="redis-cluster://$(IFS=,; echo "${hosts[*]}")"
}

# Writes $lt_work/gateway.toml: tenant "bench" with limits that never refuse the load, on the
# broker $1 ("memory", "redis" on lt_redis_port, or "cluster" on lt_cluster_url); the lines of
# $LT_TENANT_EXTRA, when set, go into the tenant's table; $LT_KEY_POLICY, when set, is the
# policy of the tenant's API key (a TOML inline table, e.g. `{hints = "readOnly"}`).
lt_write_config() {
    local key_hash broker keys
    key_hash="$(printf %s "$lt_api_key" | sha256sum | cut -d' ' -f1)"
    if [[ -n "${LT_KEY_POLICY:-}" ]]; then
        keys="api_keys = [{hash = \"sha256:$key_hash\", policy = $LT_KEY_POLICY}]"
    else
        keys="api_keys = [\"sha256:$key_hash\"]"
    fi
    if [[ "$1" == redis ]]; then
        broker=$'kind = "redis"\nurl = "redis://127.0.0.1:'"$lt_redis_port"'"'
    elif [[ "$1" == cluster ]]; then
        broker=$'kind = "redis"\nurl = "'"$lt_cluster_url"'"'
    else
        broker='kind = "memory"'
    fi
    cat >"$lt_work/gateway.toml" <<TOML
[server]
drain_timeout_ms = ${DRAIN_TIMEOUT_MS:-5000}

[broker]
$broker

[[tenants]]
id = "bench"
$keys
token_secret = "$lt_token_secret"
allowed_origins = ["$lt_origin"]
${LT_TENANT_EXTRA:-}

[tenants.limits]
max_connections = 200000
max_pages_per_conversation = 32
calls_per_second = 100000
page_messages_per_second = 10000
TOML
}

# Starts gateway node $1 on an ephemeral port and waits for /readyz; sets lt_node_url and
# lt_node_pid.
lt_start_node() {
    local log="$lt_work/node-$1.log" line="" _
    RUST_LOG="${GATEWAY_LOG:-info}" "$lt_gateway_bin" --config "$lt_work/gateway.toml" --listen 127.0.0.1:0 --node-id "node-$1" >"$log" 2>&1 &
    lt_node_pid=$!
    lt_pids+=("$lt_node_pid")
    for _ in $(seq 100); do
        line="$(grep -m1 -o 'listening on http://[0-9.:]*' "$log" || true)"
        [[ -n "$line" ]] && break
        kill -0 "$lt_node_pid" 2>/dev/null || { cat "$log" >&2; echo "node $1 exited" >&2; exit 1; }
        sleep 0.1
    done
    [[ -n "$line" ]] || { cat "$log" >&2; echo "node $1 did not start" >&2; exit 1; }
    lt_node_url="${line#listening on }"
    local addr="${lt_node_url#http://}"
    for _ in $(seq 100); do
        lt_ready "${addr%:*}" "${addr##*:}" && return
        sleep 0.1
    done
    echo "node $1: /readyz never answered 200" >&2
    exit 1
}

# Whether GET /readyz answers 200 (plain bash, no HTTP client needed).
lt_ready() (
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf 'GET /readyz HTTP/1.0\r\nHost: %s:%s\r\n\r\n' "$1" "$2" >&3
    read -r _ status _ <&3 || exit 1
    [[ "$status" == "200" ]]
) 2>/dev/null
