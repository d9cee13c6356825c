# syntax=docker/dockerfile:1
# The Toolmark image: toolmark-gateway, toolmark-worker and toolmark-mcp, built in release mode
# from the locked workspace with the toolchain of rust-toolchain.toml, run as a non-root user.
#
#   docker build -t toolmark:dev .
#
# The Helm chart (charts/toolmark) runs toolmark-gateway and toolmark-worker from this image;
# toolmark-mcp is the desktop CLI, shipped here for `docker run -i --entrypoint toolmark-mcp`.

# The builder and the runtime share one Debian release, so the binaries find the glibc they
# were linked against.
ARG RUST_VERSION=1.95.0
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
ARG RUST_VERSION
# The image's toolchain is the one rust-toolchain.toml pins (make chart-test checks that they
# agree). Naming it keeps rustup from fetching the file's rustfmt and clippy, which a build
# does not use.
ENV RUSTUP_TOOLCHAIN=${RUST_VERSION}
# The commit the binaries report in toolmark_build_info (the context has no .git).
ARG REVISION=unknown
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and incremental artifacts between builds; the binaries
# are copied out of the cached target directory within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    TOOLMARK_REVISION="${REVISION}" cargo build --release --locked -p toolmark-gateway -p toolmark-worker -p toolmark-mcp \
 && mkdir -p /out \
 && cp target/release/toolmark-gateway target/release/toolmark-worker target/release/toolmark-mcp /out/

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# CA certificates for rediss://, webhook deliveries and OTLP export over HTTPS. Versions are
# left to the release's security updates.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 toolmark \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin toolmark
COPY --from=build /out/ /usr/local/bin/
ARG VERSION=0.4.0
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="toolmark" \
      org.opencontainers.image.description="Toolmark Gateway, worker and desktop MCP CLI" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/toolmark-gateway"]
CMD ["--config", "/etc/toolmark/gateway.toml"]
