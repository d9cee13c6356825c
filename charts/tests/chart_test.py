#!/usr/bin/env python3
"""chart-test: the Helm chart and the image recipe, checked offline.

For every values file charts/toolmark/ci/*-values.yaml: lint the chart, render it, validate every
manifest against the Kubernetes schemas (and the CRD schemas of charts/tests/schemas), check the
properties the chart promises (drain, probes, security context, references between objects,
alert expressions), and run `toolmark-gateway --check-config` on the rendered gateway.toml with
the environment the kubelet would give the pod. Every file of charts/toolmark/ci/bad/ must be
refused with the message its first line announces (`# expect: ...`). Then the Dockerfile:
hadolint, the packages it builds against the workspace, its toolchain against
rust-toolchain.toml, and what .dockerignore leaves in the build context.

Helm is the real one either way: the `helm` binary when it is on PATH (or given with --helm),
else Helm's Go SDK through the helm-python-sdk package. scripts/chart-test.sh installs the
Python packages and builds the gateway first.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import yaml

from harness import Failure, HelmBinary, HelmSdk, RenderError, Report, documents, load_values
from compose_check import check_compose
from image import check_dockerfile
import values_doc
from manifests import (
    KUBE_VERSIONS,
    by_kind,
    check_alerts,
    check_dashboards,
    check_gateway_deployment,
    check_references,
    component,
    known_metrics,
    runbook_anchors,
    validate_schemas,
)
from podenv import check_config, check_worker_environment

# --- Values that must be refused -----------------------------------------------------------------


def check_refused(helm, path: Path) -> None:
    first = path.read_text().splitlines()[0]
    m = re.match(r"^# expect: (.+)$", first)
    if not m:
        raise Failure("first line must be '# expect: <part of the error message>'")
    try:
        helm.render(path)
    except RenderError as e:
        if m.group(1) not in str(e):
            raise Failure(f"refused, but the message lacks {m.group(1)!r}: {e}") from None
        print(f"     refused: {str(e).splitlines()[-1].strip()}")
        return
    raise Failure("rendered, but must be refused")


# --- Main -----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--gateway", type=Path, required=True, help="the toolmark-gateway binary")
    ap.add_argument("--helm", help="a helm binary (default: helm on PATH, else the Go SDK)")
    ap.add_argument("--hadolint", help="the hadolint binary (default: hadolint on PATH)")
    args = ap.parse_args()
    repo = args.repo.resolve()
    chart = repo / "charts/toolmark"
    tests = repo / "charts/tests"
    helm_bin = args.helm or shutil.which("helm")
    helm = HelmBinary(helm_bin, chart) if helm_bin else HelmSdk(chart)
    print(f"chart-test: rendering with {helm.name}; Kubernetes schemas {', '.join(KUBE_VERSIONS)}")
    fixtures = [d for d in yaml.safe_load_all((tests / "fixtures/existing-secrets.yaml").read_text()) if d]
    metrics = known_metrics(repo)
    anchors = runbook_anchors(repo)
    report = Report()

    values_files = sorted((chart / "ci").glob("*-values.yaml"))
    if not values_files:
        print("FAIL no charts/toolmark/ci/*-values.yaml")
        return 1
    for vf in values_files:
        tag = vf.name.removesuffix("-values.yaml")
        values = load_values(vf)

        def lint(vf=vf):
            msgs = helm.lint(vf)
            if msgs:
                raise Failure("\n  " + "\n  ".join(msgs))

        report.check(f"{tag}: helm lint --strict", lint)
        rendered = report.check(f"{tag}: render", helm.render, vf)
        if rendered is None:
            continue
        docs = documents(rendered)
        kinds = sorted({d["kind"] for _, d in docs})
        print(f"     {len(docs)} manifests: {', '.join(kinds)}")
        report.check(f"{tag}: Kubernetes and CRD schemas", validate_schemas, docs, tests / "schemas")
        report.check(
            f"{tag}: gateway Deployment (drain, probes, rollout, security)", check_gateway_deployment, docs, values
        )
        report.check(f"{tag}: references between objects", check_references, docs, fixtures)
        report.check(f"{tag}: alert expressions and runbooks", check_alerts, docs, metrics, anchors)
        report.check(f"{tag}: dashboard queries", check_dashboards, docs, metrics)
        report.check(f"{tag}: worker shares the gateway's config and secrets", check_worker_environment, docs)
        verdict = report.check(
            f"{tag}: toolmark-gateway --check-config on the rendered config", check_config, docs, fixtures, args.gateway
        )
        if verdict:
            print(f"     {verdict}")
        if any(component(d) == "worker" for d in by_kind(docs, "Deployment")):
            verdict = report.check(
                f"{tag}: the same check with the worker's environment",
                check_config,
                docs,
                fixtures,
                args.gateway,
                "worker",
            )
            if verdict:
                print(f"     {verdict}")

    for bad in sorted((chart / "ci/bad").glob("*.yaml")):
        report.check(f"refused: {bad.name}", check_refused, helm, bad)

    hadolint = args.hadolint or shutil.which("hadolint")
    def readme_current() -> None:
        problem = values_doc.check(chart)
        if problem:
            raise Failure(problem)

    report.check("chart README: the table of every value is values.yaml's", readme_current)
    verdict = report.check("docker-compose.yml: each toolmark service passes --check-config", check_compose, repo, args.gateway)
    if verdict:
        print(f"     {verdict}")
    warnings = report.check("Dockerfile and .dockerignore", check_dockerfile, repo, hadolint)
    for w in warnings or []:
        print(f"WARN {w}")

    print(f"chart-test: {report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
