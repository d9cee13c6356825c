#!/usr/bin/env bash
# make image-test: builds the runtime image with buildah (daemonless; vfs storage and chroot
# isolation, which run inside a container or VM without cgroup delegation), then runs what is
# in it: each binary's --version, toolmark-gateway --help, and --check-config on the chart's
# rendered configuration (defaults and minimal values) with the environment the pod would get,
# inside the image; then it serves /healthz from the image for a moment.
#
# The image is assembled FROM scratch out of the host-built binaries, their shared libraries
# (ldd), the CA bundle and a passwd with user 65532, with the Dockerfile's user, entrypoint and
# OCI labels (source, version, revision, licenses). The Dockerfile itself needs its base
# images from a container registry, which this check must not depend on: `make image` builds
# the same image from release binaries for publishing (docs/deploy.md, step 1).
#
#   BIN_DIR=target/release scripts/image-test.sh   # the release binaries (make image)
#   KEEP_IMAGE=path.tar scripts/image-test.sh       # also writes the image as an OCI archive
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
BIN_DIR=${BIN_DIR:-target/debug}
BINS=(toolmark-gateway toolmark-worker toolmark-mcp)
say() { echo "image-test: $*" >&2; }

command -v buildah >/dev/null || { say "buildah is missing; install with: apt-get install -y buildah (scripts/deps.sh does)"; exit 1; }
[ -x target/chart-test/venv/bin/python ] || { say "the chart-test venv is missing: run scripts/chart-test.sh first (make test does)"; exit 1; }

if [ "$BIN_DIR" = target/debug ]; then
  say "building the debug binaries"
  CARGO="$CARGO" scripts/debug-bins.sh
fi
for b in "${BINS[@]}"; do
  [ -x "$BIN_DIR/$b" ] || { say "$BIN_DIR/$b is missing"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/toolmark-image.XXXXXX")
store=(--storage-driver vfs --root "$work/storage" --runroot "$work/run")
image=localhost/toolmark:test
cleanup() {
  buildah "${store[@]}" rm --all >/dev/null 2>&1 || true
  buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The root filesystem: binaries (debug symbols stripped), their libraries, CA bundle, users.
root=$work/context/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/etc/toolmark" "$root/tmp"
chmod 1777 "$root/tmp"
for b in "${BINS[@]}"; do
  strip --strip-debug -o "$root/usr/local/bin/$b" "$BIN_DIR/$b"
  for lib in $(ldd "$BIN_DIR/$b" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ntoolmark:x:65532:65532::/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\ntoolmark:x:65532:\n' >"$root/etc/group"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
source=${IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}
cat >"$work/context/Containerfile" <<CONTAINERFILE
FROM scratch
COPY rootfs/ /
LABEL org.opencontainers.image.title="toolmark" \\
      org.opencontainers.image.description="Toolmark Gateway, worker and desktop MCP CLI" \\
      org.opencontainers.image.source="$source" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$revision" \\
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/toolmark-gateway"]
CMD ["--config", "/etc/toolmark/gateway.toml"]
CONTAINERFILE

started=$(date +%s)
buildah "${store[@]}" build --quiet --isolation chroot -t "$image" "$work/context" >/dev/null
size=$(buildah "${store[@]}" images --format '{{.Size}}' "$image")
say "built $image from $BIN_DIR in $(( $(date +%s) - started )) s: $size"
user=$(buildah "${store[@]}" inspect --format '{{.OCIv1.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || { say "the image runs as $user, not 65532:65532"; exit 1; }
for label in source version revision licenses; do
  value=$(buildah "${store[@]}" inspect --format "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$label\"}}" "$image")
  [ -n "$value" ] || { say "label org.opencontainers.image.$label is missing"; exit 1; }
done

ctr=$(buildah "${store[@]}" from --quiet "$image")
for b in "${BINS[@]}"; do
  buildah "${store[@]}" run --isolation chroot "$ctr" -- "/usr/local/bin/$b" --version >&2
done
buildah "${store[@]}" run --isolation chroot "$ctr" -- /usr/local/bin/toolmark-gateway --help >/dev/null

# The chart's rendered configuration, checked by the image's own binary with the pod's
# environment and mounts (charts/tests/podenv.py), for the defaults and the minimal values.
PYTHONDONTWRITEBYTECODE=1 target/chart-test/venv/bin/python charts/tests/image_check.py \
  --buildah "buildah ${store[*]}" --container "$ctr" \
  charts/toolmark/ci/defaults-values.yaml charts/toolmark/ci/minimal-values.yaml

# A configuration error inside the image is exit 2 with the key, as outside.
printf '[server]\nlisten = "nowhere"\n' >"$work/bad.toml"
chmod 0644 "$work/bad.toml"
set +e
bad=$(buildah "${store[@]}" run --isolation chroot -v "$work/bad.toml:/etc/toolmark/gateway.toml:ro" "$ctr" -- \
  /usr/local/bin/toolmark-gateway --config /etc/toolmark/gateway.toml --check-config 2>&1)
rc=$?
set -e
case "$bad" in *server.listen*) ;; *) rc=x ;; esac
[ "$rc" = 2 ] || { say "a bad config inside the image: want exit 2 naming server.listen, got $rc: $bad"; exit 1; }

# Served from the image for a moment (chroot isolation shares the host's network).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
buildah "${store[@]}" run --isolation chroot "$ctr" -- /usr/local/bin/toolmark-gateway --listen "127.0.0.1:$port" --admin-listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
served=$!
up=""
for _ in $(seq 100); do
  if curl -fsS -m 1 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then up=1; break; fi
  sleep 0.1
done
kill "$served" 2>/dev/null || true
wait "$served" 2>/dev/null || true
[ -n "$up" ] || { cat "$work/serve.log" >&2; say "the image's gateway did not answer /healthz"; exit 1; }
say "the image's gateway served /healthz in dev mode"

if [ -n "${KEEP_IMAGE:-}" ]; then
  buildah "${store[@]}" push --quiet "$image" "oci-archive:$KEEP_IMAGE:toolmark:$version"
  say "wrote $KEEP_IMAGE"
fi
say "ok"
