#!/usr/bin/env bash
# `make upgrade-test`: the rolling-upgrade tests (gateway/tests/it/upgrade.rs) against the
# previous release, UPGRADE_BASE (default 928ba32, the build the contract names as the fourth
# wave's previous release; UPGRADE_BASE=v0.4.0 runs this wave's first release the same way;
# docs/releases.md). The previous release's gateway is built from git once, in this
# workspace's target folder (the dependencies it shares with this build are compiled once for
# both: about a minute after `make unit`), and kept in target/upgrade-base/<commit>/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
CARGO=${CARGO:-cargo}
base=${UPGRADE_BASE:-928ba32}
commit=$(git rev-parse --verify "$base^{commit}") || { echo "upgrade-test: $base is not a commit of this repository" >&2; exit 2; }
dir="$root/target/upgrade-base/${commit:0:12}"
bin="$dir/toolmark-gateway"
# The workspace's version in the Cargo.toml on standard input.
version_of() { sed -n 's/^version = "\(.*\)"$/\1/p' | head -1; }
if [ ! -x "$bin" ]; then
  echo "upgrade-test: building the previous release ($base, ${commit:0:12}) once, into $dir"
  rm -rf "$dir/src"
  mkdir -p "$dir/src"
  git archive "$commit" | tar -x -C "$dir/src"
  # An archive has no history of its own: the revision is named, or git would name this checkout's.
  # Its binary lands where this build's does; cargo puts this build's back at its next run.
  # Cargo names a workspace crate's build by its name, version and path inside the workspace,
  # not by the workspace's own path: a previous release of the same version as this workspace
  # (this one before its next release is cut) would take this build's crates for its own. It
  # gets a target folder of its own then.
  target="$root/target"
  if [ "$(version_of < Cargo.toml)" = "$(git show "$commit:Cargo.toml" | version_of)" ]; then
    target="$root/target/upgrade-base/target"
  fi
  (cd "$dir/src" && TOOLMARK_REVISION="${commit:0:12}" CARGO_TARGET_DIR="$target" "$CARGO" build --locked -p toolmark-gateway --bin toolmark-gateway)
  cp "$target/debug/toolmark-gateway" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$dir/src"
fi
echo "upgrade-test: previous release: $("$bin" --version)"
TOOLMARK_PREVIOUS_GATEWAY="$bin" CARGO="$CARGO" scripts/test-target.sh toolmark-gateway it upgrade:: --ignored --test-threads 1
