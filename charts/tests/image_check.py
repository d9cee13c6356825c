"""--check-config inside the built image (scripts/image-test.sh): the chart rendered with each
values file given, and the image's toolmark-gateway run on the gateway's and the worker's
configuration and environment, with the pod's mounts emulated (podenv.check_config)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from harness import Failure, HelmSdk, documents
from manifests import by_kind, component
from podenv import check_config


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--buildah", required=True, help="the buildah command with its storage flags")
    ap.add_argument("--container", required=True, help="a working container of the image")
    ap.add_argument("values", nargs="+", type=Path)
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[2]
    chart = repo / "charts/toolmark"
    fixtures = [d for d in yaml.safe_load_all((repo / "charts/tests/fixtures/existing-secrets.yaml").read_text()) if d]
    buildah = shlex.split(args.buildah)

    def in_image(argv: list[str], env: dict[str, str], root: str) -> subprocess.CompletedProcess:
        # The image runs as 65532: the emulated mounts must be readable by it, as the
        # kubelet's are.
        for d, _, files in os.walk(root):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        cmd = [*buildah, "run", "--isolation", "chroot", "-v", f"{root}:{root}:ro"]
        for k, v in env.items():
            cmd += ["--env", f"{k}={v}"]
        cmd += [args.container, "--", "/usr/local/bin/toolmark-gateway", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    helm = HelmSdk(chart)
    failed = False
    for values in args.values:
        docs = documents(helm.render(repo / values if not values.is_absolute() else values))
        names = ["gateway"] + (["worker"] if any(component(d) == "worker" for d in by_kind(docs, "Deployment")) else [])
        for name in names:
            try:
                verdict = check_config(docs, fixtures, Path("unused"), name, runner=in_image)
                print(f"image-test: {values.name} ({name}): {verdict}", file=sys.stderr)
            except Failure as e:
                print(f"image-test: {values.name} ({name}): {e}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
