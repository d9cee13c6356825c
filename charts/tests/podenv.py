"""The gateway's own verdict on the rendered configuration: toolmark-gateway --check-config
run on the ConfigMap's gateway.toml with the environment the kubelet would give the pod."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from harness import Failure
from manifests import by_kind, component, configmap_values, one, secret_values

# The pod-template hash and the random suffix Kubernetes adds to a Deployment's pod names.
POD_SUFFIX = ("6d5f7c9b8d", "x7k2p")


def pod_name(deployment: str) -> str:
    """A pod name as a Deployment makes them (for fieldRef metadata.name): its ReplicaSet is
    `<deployment>-<hash>`, whose pods take `generateName`, cut to 58 characters, plus 5."""
    generate_name = f"{deployment}-{POD_SUFFIX[0]}-"[:58]
    return generate_name + POD_SUFFIX[1]


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ escapes."""

    def sub(m):
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$\([A-Za-z_][A-Za-z0-9_]*\)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def pod_environment(container: dict, secrets: dict, configmaps: dict, pod: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
            continue
        src = item["valueFrom"]
        if "fieldRef" in src:
            if src["fieldRef"]["fieldPath"] != "metadata.name":
                raise Failure(f"env {item['name']}: fieldRef {src['fieldRef']['fieldPath']} not emulated")
            env[item["name"]] = pod
        elif "secretKeyRef" in src or "configMapKeyRef" in src:
            ref = src.get("secretKeyRef") or src["configMapKeyRef"]
            store = secrets if "secretKeyRef" in src else configmaps
            value = store.get(ref["name"], {}).get(ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                raise Failure(f"env {item['name']}: {ref['name']}/{ref['key']} not found")
            env[item["name"]] = value
        else:
            raise Failure(f"env {item['name']}: {list(src)} not emulated")
    return env


def check_config(docs, fixtures, gateway: Path, name: str = "gateway", runner=None) -> str:
    """Runs the gateway's validation on the config file and environment of container `name`.

    `runner(argv, env, root)` runs it elsewhere (inside the image: charts/tests/image_check.py);
    `argv` starts with the arguments after the binary, `root` is the emulated mounts' directory.

    The worker loads the same file with the same loader (toolmark_gateway::config), so the
    gateway's --check-config with the worker's environment is the worker's own check."""
    dep = one([d for d in by_kind(docs, "Deployment") if component(d) == name], f"{name} Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = one([c for c in pod["containers"] if c["name"] == name], f"{name} container")
    if c["command"] != [f"/usr/local/bin/toolmark-{name}"]:
        raise Failure(f"unexpected command {c['command']}")
    secrets = secret_values(docs, fixtures)
    configmaps = configmap_values(docs, fixtures)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    with tempfile.TemporaryDirectory(prefix="chart-test-") as root:
        mounts = []
        for m in c.get("volumeMounts", []):
            vol = volumes[m["name"]]
            target = Path(root + m["mountPath"])
            target.mkdir(parents=True, exist_ok=True)
            if "configMap" in vol:
                for key, text in configmaps[vol["configMap"]["name"]].items():
                    (target / key).write_text(text)
            elif "secret" in vol:
                for key, text in secrets[vol["secret"]["secretName"]].items():
                    (target / key).write_text(text)
            elif "emptyDir" not in vol and "persistentVolumeClaim" not in vol:
                # A claim starts as an empty folder, as an emptyDir does.
                raise Failure(
                    f"volume {m['name']}: only configMap, secret, emptyDir and persistentVolumeClaim are emulated"
                )
            mounts.append(m["mountPath"])
        # Paths into mounted volumes inside the rendered config (server.tls_cert) point into
        # the emulated mounts too.
        for m in c.get("volumeMounts", []):
            vol = volumes[m["name"]]
            if "configMap" in vol:
                for key in configmaps[vol["configMap"]["name"]]:
                    f = Path(root + m["mountPath"]) / key
                    # One pass, longest mount first (the emulated root itself may start with one).
                    alternatives = "|".join(re.escape(mp) for mp in sorted(mounts, key=len, reverse=True))
                    text = re.sub(f'"({alternatives})/', lambda hit: f'"{root}{hit.group(1)}/', f.read_text())
                    f.write_text(text)
        args = []
        for a in c.get("args", []):
            if any(a.startswith(mp + "/") for mp in mounts):
                a = root + a
            args.append(a)
        env = pod_environment(c, secrets, configmaps, pod_name(dep["metadata"]["name"]))
        # Paths into mounted volumes (e.g. SSL_CERT_FILE) point into the emulated mounts too.
        for k, v in env.items():
            if any(v.startswith(mp + "/") for mp in mounts):
                env[k] = root + v
        if runner is None:
            p = subprocess.run(
                [str(gateway), *args, "--check-config"], env=env, capture_output=True, text=True, check=False
            )
        else:
            p = runner([*args, "--check-config"], env, root)
        if p.returncode != 0:
            raise Failure(f"toolmark-gateway --check-config exited {p.returncode}: {p.stderr.strip()}")
        return p.stderr.strip()


def check_worker_environment(docs) -> None:
    workers = [d for d in by_kind(docs, "Deployment") if component(d) == "worker"]
    if not workers:
        return
    gw = one([d for d in by_kind(docs, "Deployment") if component(d) == "gateway"], "gateway Deployment")
    g = gw["spec"]["template"]["spec"]["containers"][0]
    w = workers[0]["spec"]["template"]["spec"]["containers"][0]
    # Ready only while Redis answers (/healthz says the process lives, nothing more).
    if w["readinessProbe"]["httpGet"]["path"] != "/readyz":
        raise Failure("the worker's readiness probe must be /readyz")
    # The Redis URL, its password, the admin keys and every tenant secret; extraEnv is each
    # component's own.
    prefixes = ("TOOLMARK_TENANTS__", "TOOLMARK_BROKER__", "TOOLMARK_REDIS_PASSWORD", "TOOLMARK_ADMIN__")
    shared = [e for e in g["env"] if e["name"].startswith(prefixes)]
    missing = [e["name"] for e in shared if e not in w["env"]]
    if missing:
        raise Failure(f"the worker lacks the gateway's {missing}")
    if w["args"] != g["args"]:
        raise Failure("the worker does not read the gateway's config file")
