#!/usr/bin/env bash
# The debug binaries the scripted tests run (target/debug/toolmark-gateway, toolmark-worker,
# toolmark-mcp), as `cargo test --workspace` builds them for the integration tests: nothing to
# build once `make unit` has run. Why not `cargo build -p toolmark-gateway`: cargo turns on each
# dependency's features for the packages it is asked to build, and one package without its
# tests is a different set from the workspace's tests', so most dependencies would be built a
# second time (about a minute on two cores; scripts/test-target.sh says the same of tests).
set -euo pipefail
cd "$(dirname "$0")/.."
"${CARGO:-cargo}" test --workspace --locked --no-run --quiet
