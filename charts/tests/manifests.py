"""Checks on the rendered manifests: Kubernetes and CRD schemas, what the chart promises
(drain, probes, rollout, security), the references between objects and the alert rules."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import promql_parser

from harness import Failure

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the
# installed kubernetes-validate knows.
KUBE_VERSIONS = ["1.27.0", kubernetes_validate.utils.latest_version()]
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-gateway-v1.json",
}


# --- Kubernetes and CRD schemas -------------------------------------------------------------------


def validate_schemas(docs: list[tuple[str, dict]], schema_dir: Path) -> None:
    problems = []
    for source, doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        where = f"{source} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if key in CRD_SCHEMAS:
            schema = json.loads((schema_dir / CRD_SCHEMAS[key]).read_text())
            for err in jsonschema.Draft202012Validator(schema).iter_errors(doc):
                path = ".".join(str(p) for p in err.absolute_path)
                problems.append(f"{where}: {path}: {err.message}")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                path = ".".join(str(p) for p in err.path)
                problems.append(f"{where} (Kubernetes {version}): {path}: {err.message}")
            except kubernetes_validate.SchemaNotFoundError:
                problems.append(f"{where}: no schema for {key[0]} {key[1]} in Kubernetes {version}")
    if problems:
        raise Failure("\n  " + "\n  ".join(problems))


# --- What the chart promises ----------------------------------------------------------------------


def by_kind(docs, kind):
    return [d for _, d in docs if d.get("kind") == kind]


def component(doc) -> str:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


def one(items, what):
    if len(items) != 1:
        raise Failure(f"expected one {what}, found {len(items)}")
    return items[0]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def secret_values(docs, fixtures) -> dict[str, dict[str, str]]:
    """Secret name → key → value, from rendered Secrets and the stand-ins for existing ones."""
    out: dict[str, dict[str, str]] = {}
    for doc in [f for f in fixtures if f["kind"] == "Secret"] + by_kind(docs, "Secret"):
        values = dict(doc.get("stringData") or {})
        for k, v in (doc.get("data") or {}).items():
            values[k] = base64.b64decode(v).decode()
        out[doc["metadata"]["name"]] = values
    return out


def check_gateway_deployment(docs, values: dict) -> None:
    dep = one([d for d in by_kind(docs, "Deployment") if component(d) == "gateway"], "gateway Deployment")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    c = one([c for c in pod["containers"] if c["name"] == "gateway"], "gateway container")
    problems = []
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    if "store" in volumes:
        # The admin store's SQLite file on a ReadWriteOnce claim: one pod at a time holds it.
        if spec["strategy"]["type"] != "Recreate":
            problems.append("a gateway holding the SQLite store's volume must be replaced with Recreate")
        if spec.get("replicas", 1) != 1:
            problems.append("the SQLite store is for one gateway")
        if not any(e["name"] == "TOOLMARK_ADMIN__STORE" and e.get("value", "").startswith("sqlite:///var/lib/toolmark/") for e in c.get("env", [])):
            problems.append("the store volume is mounted but admin.store does not name a file on it")
    elif spec["strategy"]["rollingUpdate"]["maxUnavailable"] != 0:
        problems.append("rolling update must have maxUnavailable: 0")
    if c["readinessProbe"]["httpGet"]["path"] != "/readyz":
        problems.append("readiness probe must be /readyz")
    if c["livenessProbe"]["httpGet"]["path"] != "/healthz":
        problems.append("liveness probe must be /healthz")
    pre = c.get("lifecycle", {}).get("preStop")
    if not pre:
        problems.append("no preStop hook")
    sleep = int(pre["exec"]["command"][-1]) if pre and "exec" in pre else 0
    drain_ms = values.get("config", {}).get("drainTimeoutMs", 10000)
    grace = pod["terminationGracePeriodSeconds"]
    if grace * 1000 <= drain_ms + sleep * 1000:
        problems.append(
            f"terminationGracePeriodSeconds {grace} is not longer than preStop {sleep} s + drain {drain_ms} ms"
        )
    hpa = values.get("gateway", {}).get("autoscaling", {}).get("enabled", False)
    if hpa == ("replicas" in spec):
        problems.append("replicas must be set exactly when autoscaling is off")
    problems += security_problems(pod, "gateway")
    if values.get("gateway", {}).get("topologySpread", {}).get("enabled", True):
        keys = {t["topologyKey"] for t in pod.get("topologySpreadConstraints", [])}
        if not {"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= keys:
            problems.append("no topology spread over zones and nodes")
    if problems:
        raise Failure("; ".join(problems))


def security_problems(pod: dict, what: str) -> list[str]:
    problems = []
    psc = pod.get("securityContext", {})
    if not psc.get("runAsNonRoot") or psc.get("runAsUser", 0) == 0:
        problems.append(f"{what}: pod must run as a non-root user")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{what}: the service account token must not be mounted")
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{what}/{c['name']}: root filesystem must be read-only")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{what}/{c['name']}: privilege escalation must be off")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []) or sc.get("capabilities", {}).get("add"):
            problems.append(f"{what}/{c['name']}: every capability must be dropped")
        if not c.get("resources", {}).get("requests"):
            problems.append(f"{what}/{c['name']}: resource requests missing")
    return problems


def configmap_values(docs, fixtures) -> dict[str, dict[str, str]]:
    """ConfigMap name → key → value, rendered or stand-ins for existing ones."""
    maps = [f for f in fixtures if f["kind"] == "ConfigMap"] + by_kind(docs, "ConfigMap")
    return {d["metadata"]["name"]: d.get("data", {}) for d in maps}


def check_references(docs, fixtures) -> None:
    """Every name one object gives another resolves within the release (or to a stand-in)."""
    problems = []
    secrets = secret_values(docs, fixtures)
    configmaps = configmap_values(docs, fixtures)
    deployments = by_kind(docs, "Deployment")
    services = by_kind(docs, "Service")
    accounts = {d["metadata"]["name"] for d in by_kind(docs, "ServiceAccount")}
    for dep in deployments:
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        if not selects(dep["spec"]["selector"]["matchLabels"], labels):
            problems.append(f"Deployment {name}: selector does not match its pods")
        if pod.get("serviceAccountName") not in accounts:
            problems.append(f"Deployment {name}: service account {pod.get('serviceAccountName')} not rendered")
        security = security_problems(pod, f"Deployment {name}")
        problems += security
        for vol in pod.get("volumes", []):
            if "configMap" in vol and vol["configMap"]["name"] not in configmaps:
                problems.append(f"Deployment {name}: ConfigMap {vol['configMap']['name']} missing")
            if "secret" in vol and vol["secret"]["secretName"] not in secrets:
                problems.append(f"Deployment {name}: Secret {vol['secret']['secretName']} missing")
        for c in pod["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    if ref["name"] not in secrets:
                        problems.append(f"{name}: env {env['name']}: Secret {ref['name']} missing")
                    elif ref["key"] not in secrets[ref["name"]]:
                        problems.append(f"{name}: env {env['name']}: key {ref['key']} missing in Secret {ref['name']}")
    pods = [(d["spec"]["template"]["metadata"]["labels"], d["spec"]["template"]["spec"]) for d in deployments]
    for svc in services:
        sname = svc["metadata"]["name"]
        matched = [p for labels, p in pods if selects(svc["spec"]["selector"], labels)]
        if not matched:
            problems.append(f"Service {sname}: selects no pod")
        port_names = {p.get("name") for _, spec in pods for c in spec["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            if isinstance(port["targetPort"], str) and port["targetPort"] not in port_names:
                problems.append(f"Service {sname}: targetPort {port['targetPort']} is no container port")
    svc_ports = {s["metadata"]["name"]: {p["name"]: p["port"] for p in s["spec"]["ports"]} for s in services}
    for ing in by_kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                b = path["backend"]["service"]
                if b["port"].get("name") not in svc_ports.get(b["name"], {}):
                    problems.append(f"Ingress: backend {b['name']}:{b['port']} missing")
    for route in by_kind(docs, "HTTPRoute"):
        for rule in route["spec"]["rules"]:
            for b in rule["backendRefs"]:
                if b["port"] not in svc_ports.get(b["name"], {}).values():
                    problems.append(f"HTTPRoute: backend {b['name']}:{b['port']} missing")
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]["name"]
        if target not in {d["metadata"]["name"] for d in deployments}:
            problems.append(f"HPA: target {target} missing")
    for pdb in by_kind(docs, "PodDisruptionBudget"):
        if not any(selects(pdb["spec"]["selector"]["matchLabels"], labels) for labels, _ in pods):
            problems.append(f"PodDisruptionBudget {pdb['metadata']['name']}: selects no pod")
    for sm in by_kind(docs, "ServiceMonitor"):
        selected = [s for s in services if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        names = {p["name"] for s in selected for p in s["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            if ep["port"] not in names and not (
                ep["port"] == "metrics" and not any(component(s) == "worker" for s in services)
            ):
                problems.append(f"ServiceMonitor: port {ep['port']} on no selected Service")
    for np in by_kind(docs, "NetworkPolicy"):
        selected = [spec for labels, spec in pods if selects(np["spec"]["podSelector"]["matchLabels"], labels)]
        if not selected:
            problems.append(f"NetworkPolicy {np['metadata']['name']}: selects no pod")
        names = {p.get("name") for spec in selected for c in spec["containers"] for p in c.get("ports", [])}
        for rule in np["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if isinstance(port["port"], str) and port["port"] not in names:
                    problems.append(f"NetworkPolicy {np['metadata']['name']}: port {port['port']} is no container port")
    if problems:
        raise Failure("\n  " + "\n  ".join(problems))


def known_metrics(repo: Path) -> set[str]:
    """Series the gateway exports: registered names, counters with _total, histograms' series."""
    names = set()
    sources = [
        path
        for crate in ("gateway", "worker", "process")
        for path in sorted(repo.glob(f"{crate}/src/**/metrics.rs"))
    ]
    for source in sources:
        for name in re.findall(r'register\(\s*"([a-z_]+)"', source.read_text()):
            names.update({name, f"{name}_total", f"{name}_bucket", f"{name}_sum", f"{name}_count"})
    # Series of Prometheus itself and of kube-state-metrics that the alerts rely on.
    names.update({"up", "kube_deployment_status_replicas_available", "kube_deployment_spec_replicas"})
    return names


def runbook_anchors(repo: Path) -> set[str]:
    """The anchors of docs/operations.md's headings, as a Markdown renderer makes them."""
    anchors = set()
    for line in (repo / "docs/operations.md").read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return anchors


def check_expression(where: str, expr: str, metrics: set[str], problems: list[str]) -> None:
    try:
        promql_parser.parse(expr)
    except Exception as e:  # the parser raises its own exception types
        problems.append(f"{where}: {e}")
        return
    for name in re.findall(r"\b([a-z_][a-z0-9_]*)\s*\{", expr):
        if name not in metrics and name not in {"by", "without", "on", "ignoring"}:
            problems.append(f"{where}: unknown series {name}")


def check_alerts(docs, metrics: set[str], anchors: set[str]) -> None:
    """Every alert parses, names only series that exist, and links a runbook that exists."""
    problems = []
    for rule_doc in by_kind(docs, "PrometheusRule"):
        for group in rule_doc["spec"]["groups"]:
            for rule in group["rules"]:
                alert = rule.get("alert")
                check_expression(alert, str(rule["expr"]), metrics, problems)
                url = rule.get("annotations", {}).get("runbook_url", "")
                page, _, anchor = url.partition("#")
                if not page.endswith("docs/operations.md") or anchor not in anchors:
                    problems.append(f"{alert}: runbook_url {url!r} is not a section of docs/operations.md")
    if problems:
        raise Failure("; ".join(problems))


def check_dashboards(docs, metrics: set[str]) -> None:
    """Every panel query of a shipped Grafana dashboard parses and names only series that exist."""
    problems = []
    maps = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    for m in maps:
        for key, text in m["data"].items():
            board = json.loads(text)
            targets = [t for p in board["panels"] for t in p.get("targets", [])]
            if not targets:
                problems.append(f"{key}: no panel queries")
            for t in targets:
                # Grafana's variables, as Grafana substitutes them.
                expr = t["expr"].replace("$__rate_interval", "5m").replace("$job", ".*")
                check_expression(f"{key} {t['refId']}", expr, metrics, problems)
    if problems:
        raise Failure("; ".join(problems))
