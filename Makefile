# Toolmark Gateway: the two commands a person needs are `make run` and `make test`.
# Everything else here is what those two (and CI, through .ci/run) are made of.

CARGO ?= cargo
FUZZ_SECONDS ?= 60
export CARGO_TERM_COLOR ?= never

.PHONY: run test deps lint unit api examples chart-test image-test image browser mcp-e2e pusher bench bench-compare admin-propagation scale-sim profile load-test soak cluster-faults upgrade-test rolling-upgrade fuzz release clean

## run: the gateway in dev mode (memory broker, tenant `dev`, demo page at /demo)
run:
	$(CARGO) run --release -p toolmark-gateway --bin toolmark-gateway

## test: install what the tests need, then lint and every test
test: deps lint unit upgrade-test api examples chart-test image-test browser mcp-e2e pusher

## deps: install the system packages the tests use when they are missing (Debian)
deps:
	@scripts/deps.sh

## lint: formatting and clippy, warnings are errors; the layering (which crate and which of the
## gateway's doors may use which: testkit/tests/layering.rs, CONTRIBUTING.md); then cargo-deny
## on licenses, duplicate versions, sources and advisories (deny.toml, scripts/deny.sh)
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CARGO) test --workspace --locked --test layering
	CARGO="$(CARGO)" scripts/deny.sh

## unit: every Rust test of the workspace (unit, integration, property), then the gateway's
## suite again on a Redis and on a six-node Redis Cluster started by the tests themselves
## (the workspace's build of it: scripts/test-target.sh says why not `cargo test -p`)
unit:
	$(CARGO) test --workspace --locked
	TOOLMARK_TEST_BROKER=redis CARGO="$(CARGO)" scripts/test-target.sh toolmark-gateway it
	TOOLMARK_TEST_BROKER=redis-cluster CARGO="$(CARGO)" scripts/test-target.sh toolmark-gateway it

## api: the OpenAPI document validated as OpenAPI 3.1 (a validator from the package registry)
api:
	scripts/api-test.sh

## examples: the integration kit in examples/ against a dev gateway (page tokens minted in Node, Python, PHP)
examples:
	scripts/examples-test.sh

## chart-test: lint, render and validate the Helm chart; --check-config on its rendered config; lint the Dockerfile
chart-test:
	CARGO="$(CARGO)" scripts/chart-test.sh

## image-test: the runtime image built with buildah (daemonless) from the debug binaries, and
## what runs in it: --version, --help, --check-config on the chart's rendered config, /healthz
image-test:
	CARGO="$(CARGO)" scripts/image-test.sh

## image: the same image from release binaries, written to target/toolmark-image.tar (OCI)
image:
	$(CARGO) build --release --locked -p toolmark-gateway -p toolmark-worker -p toolmark-mcp
	BIN_DIR=target/release KEEP_IMAGE=target/toolmark-image.tar CARGO="$(CARGO)" scripts/image-test.sh

## browser: the demo page and a WebMCP page (polyfilled and native) end to end in headless Chromium
browser:
	scripts/browser-test.sh

## mcp-e2e: toolmark-mcp with real MCP clients (Python SDK, MCP Inspector CLI, the demo page in Chromium)
mcp-e2e:
	scripts/mcp-e2e.sh

## pusher: the Laravel Echo endpoint (Pusher protocol) driven by the real pusher-js client in Node
pusher:
	scripts/pusher-test.sh

## bench: criterion benchmarks, then the gateway's load figures (docs/benchmarks.md, docs/img/)
bench:
	$(CARGO) bench -p toolmark-proto --bench decode
	CARGO="$(CARGO)" load-tests/bench.sh

## bench-compare: the load figures of the working tree against BASE=<git ref>, in one run,
## alternating the two builds, with the ratio of every figure (docs/img/bench-compare/summary.md)
bench-compare:
	CARGO="$(CARGO)" load-tests/bench-compare.sh

## admin-propagation: how long an admin API change through node 1 takes to hold on node 3
## (three release nodes on Redis, 1,000 changes; docs/benchmarks.md)
admin-propagation:
	CARGO="$(CARGO)" load-tests/admin-propagation.sh

## load-test: k6 mixed scenario against a local two-node gateway on Redis (about a minute);
## fails when a threshold is crossed (not part of `test`: it is a load test)
load-test:
	CARGO="$(CARGO)" load-tests/load-test.sh

## scale-sim: ten gateway nodes with 1,000 pages each on a six-node Redis Cluster, calls across
## them at RATE (1000/s): per-shard command rates beside the model of docs/scaling.md
scale-sim:
	CARGO="$(CARGO)" load-tests/scale-sim.sh

## profile: CPU flame graphs of one node and of two nodes on Redis under call load
## (docs/img/flame-*.svg; needs linux-perf and `cargo install inferno`)
profile:
	CARGO="$(CARGO)" load-tests/profile.sh

## soak: two nodes on Redis for SOAK_MINUTES (default 15) at the real TTLs and grace periods,
## with quiet, moving and late-confirming pages, Redis stalled (SIGSTOP) 5 s every 2 minutes
## (SOAK_STALL_EVERY=0: never); counts faults, page frames held and dropped, and reports RSS and
## Redis memory (not part of `test`)
soak:
	CARGO="$(CARGO)" load-tests/soak.sh

## cluster-faults: the Redis Cluster fault tests (gateway/tests/cluster) with each fault done
## FAULT_ROUNDS times, one test at a time, each on a six-node cluster of its own under call load
## through two nodes: prints the table of counts and slowest recoveries (docs/benchmarks.md)
FAULT_ROUNDS ?= 5
cluster-faults:
	TOOLMARK_FAULT_ROUNDS=$(FAULT_ROUNDS) $(CARGO) test --locked -p toolmark-gateway --test cluster -- --nocapture --test-threads 1 2>&1 | tee target/cluster-faults.log
	@echo "| fault | faults | calls | answered | 503 | timeouts | slowest recovery (after the topology change) |"
	@echo "|---|---|---|---|---|---|---|"
	@grep -o 'FIGURES.*' target/cluster-faults.log | sed 's/^FIGURES //'
	@! grep -q 'test result: FAILED' target/cluster-faults.log

## fuzz: every cargo-fuzz target of fuzz/ for FUZZ_SECONDS each (stable toolchain,
## RUSTC_BOOTSTRAP): the page frame decoder, the Pusher client frame, the /inbound body, the
## MCP pairing frame, the config file and the agent API bodies
FUZZ_TARGETS ?= decode pusher_frame inbound_body pairing_frame config_file api_bodies
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t corpus/$$t seeds/$$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=65536 || exit 1; \
	done

## upgrade-test: nodes of the previous release (UPGRADE_BASE, default 928ba32, built from git
## once, sharing this build's dependencies, kept in target/upgrade-base/) and of this build on
## one Redis: calls, events, webhooks and confirmations both ways, a page moving, every node
## replaced under calls and the rollback (part of `make test`)
upgrade-test:
	CARGO="$(CARGO)" scripts/upgrade-test.sh

## rolling-upgrade: two release nodes of the previous release (UPGRADE_BASE, default 928ba32)
## replaced one at a time by this build's under ROLL_RATE (500) calls/s with the load generator,
## then rolled back: calls answered, timed out and lost, pages back (docs/benchmarks.md)
rolling-upgrade:
	CARGO="$(CARGO)" load-tests/rolling-upgrade.sh

## release: cut the release VERSION (MAJOR.MINOR.PATCH, above the workspace's): the workspace,
## Cargo.lock, the chart, the image's version and the CHANGELOG move to it, in one commit
## "Release VERSION" tagged vVERSION, pushed by you once CI passes on it (docs/releases.md);
## DRY_RUN=1 prints the changes and the checks and changes nothing (scripts/release)
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z [DRY_RUN=1]" >&2; exit 2; }
	CARGO="$(CARGO)" scripts/release $(if $(DRY_RUN),--dry-run) $(VERSION)

clean:
	$(CARGO) clean
