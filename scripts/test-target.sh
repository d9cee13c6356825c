#!/usr/bin/env bash
# One test target of the workspace's test build, run from its package's folder as `cargo test`
# runs it: `scripts/test-target.sh <package> <test target> [arguments of the test binary...]`
# (`make unit` runs the gateway's suite again on Redis and on Redis Cluster this way, and
# `make upgrade-test` its upgrade tests).
#
# Why not `cargo test -p <package> --test <target>`: cargo turns on each dependency's features
# for the packages it is asked to build, so one package alone is a different set of features
# from the whole workspace's, and most dependencies are built a second time (about 80 s on two
# cores after `cargo test --workspace`). This builds what `cargo test --workspace` builds (nothing
# once it has run) and runs the binary it made.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 <package> <test target> [arguments of the test binary...]" >&2; exit 2; }
package=$1
target=$2
shift 2
found=$("${CARGO:-cargo}" test --workspace --locked --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, os, sys
package, target = sys.argv[1], sys.argv[2]
found = None
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    pid = m["package_id"]
    if found is None and t["name"] == target and "test" in t["kind"] and ("#" + package + "@" in pid or pid.startswith(package + " ")):
        found = (os.path.dirname(m["manifest_path"]), m["executable"])
if found:
    print(found[0])
    print(found[1])
' "$package" "$target")
[ -n "$found" ] || { echo "test-target: no test target $target in package $package" >&2; exit 2; }
dir=$(sed -n 1p <<<"$found")
exe=$(sed -n 2p <<<"$found")
cd "$dir"
exec "$exe" "$@"
