#!/usr/bin/env bash
# `make upgrade-test`: the rolling-upgrade tests (gateway/tests/it/upgrade.rs) against the
# previous release, UPGRADE_BASE (default v0.4.0, the latest release; 928ba32 is the build
# operators ran before the first release; docs/releases.md). The previous release's gateway is built from git once, in
# its own target folder (target/upgrade-base/<commit>/), and kept there for the next runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
CARGO=${CARGO:-cargo}
base=${UPGRADE_BASE:-v0.4.0}
commit=$(git rev-parse --verify "$base^{commit}") || { echo "upgrade-test: $base is not a commit of this repository" >&2; exit 2; }
dir="$root/target/upgrade-base/${commit:0:12}"
bin="$dir/toolmark-gateway"
if [ ! -x "$bin" ]; then
  echo "upgrade-test: building the previous release ($base, ${commit:0:12}) once, into $dir"
  rm -rf "$dir/src"
  mkdir -p "$dir/src"
  git archive "$commit" | tar -x -C "$dir/src"
  (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" "$CARGO" build --locked -p toolmark-gateway --bin toolmark-gateway)
  cp "$dir/target/debug/toolmark-gateway" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$dir/src"
fi
echo "upgrade-test: previous release: $("$bin" --version)"
TOOLMARK_PREVIOUS_GATEWAY="$bin" "$CARGO" test --locked -p toolmark-gateway --test it upgrade:: -- --ignored --test-threads 1
