# Sourced by the end-to-end scripts: starts the gateway in dev mode on a free loopback port and
# reads what the tests need from its output. Sets dev_gw (pid), dev_url, dev_key, dev_pusher_key,
# dev_pusher_secret, dev_token_secret, dev_admin_url and dev_admin_key; stop it with stop_dev_gateway (the
# callers' EXIT traps do).

start_dev_gateway() {
  dev_work=$(mktemp -d)
  RUST_LOG=warn "${CARGO_TARGET_DIR:-target}"/debug/toolmark-gateway --listen 127.0.0.1:0 >"$dev_work/out" 2>"$dev_work/err" &
  dev_gw=$!
  for _ in $(seq 1 100); do
    grep -q 'admin listening on' "$dev_work/out" 2>/dev/null && break
    sleep 0.1
  done
  dev_url=$(sed -n 's/^toolmark-gateway listening on //p' "$dev_work/out")
  dev_admin_url=$(sed -n 's/^toolmark-gateway admin listening on //p' "$dev_work/out")
  dev_admin_key=$(grep -o 'tma_[0-9a-f]*' "$dev_work/err" | head -1)
  dev_token_secret=$(sed -n 's/.*token secret \([^ ,]*\).*/\1/p' "$dev_work/err" | head -1)
  dev_key=$(grep -o 'tmk_dev_[0-9a-f]*' "$dev_work/err" | head -1)
  dev_pusher_key=$(sed -n 's/.*pusher key \([^ ,]*\).*/\1/p' "$dev_work/err" | head -1)
  dev_pusher_secret=$(sed -n 's/.*pusher secret \([^ ,]*\).*/\1/p' "$dev_work/err" | head -1)
  if [ -z "$dev_url" ] || [ -z "$dev_key" ]; then
    echo "the gateway did not start:" >&2
    cat "$dev_work/err" >&2
    return 1
  fi
}

stop_dev_gateway() {
  if [ -n "${dev_gw:-}" ]; then
    kill "$dev_gw" 2>/dev/null || true
    wait "$dev_gw" 2>/dev/null || true
  fi
  [ -n "${dev_work:-}" ] && rm -rf "$dev_work"
  return 0
}
