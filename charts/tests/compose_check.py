"""The quickstart (docker-compose.yml): its services as Compose would start them, each
toolmark service's configuration and environment checked by toolmark-gateway --check-config
(the worker loads the same file with the same loader), with a .env made by
deploy/compose/env.sh; and without a .env, Compose refuses to start (the `:?` variables)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from harness import Failure

VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(?::([?-])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}."""

    def sub(m):
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == "?":
            raise Failure(f"{name}: {arg}")
        return arg if op == "-" else ""

    return VARIABLE.sub(sub, value)


def dotenv(repo: Path) -> dict[str, str]:
    out = subprocess.run([str(repo / "deploy/compose/env.sh")], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))


def check_compose(repo: Path, gateway: Path) -> str:
    compose = yaml.safe_load((repo / "docker-compose.yml").read_text())
    services = compose["services"]
    want = {"redis", "postgres", "gateway-1", "gateway-2", "worker"}
    if set(services) != want:
        raise Failure(f"services {sorted(services)}, want {sorted(want)}")
    published = [p.rsplit(":", 1)[0] for s in services.values() for p in s.get("ports", [])]
    if len(published) != len(set(published)):
        raise Failure(f"a host port is published twice: {published}")
    # Without a .env the quickstart does not start (the keys are not guessable defaults).
    try:
        interpolate(str(services["gateway-1"]["environment"]), {})
        raise Failure("the admin keys have defaults: Compose would start without a .env")
    except Failure as e:
        if "make .env" not in str(e):
            raise
    env = dotenv(repo)
    verdicts = []
    for name in ["gateway-1", "gateway-2", "worker"]:
        s = services[name]
        mounts = {}
        for v in s.get("volumes", []):
            host, inside = v.split(":")[:2]
            mounts[inside] = str((repo / host).resolve())
        argv = [mounts.get(a, a) for a in s["command"]]
        # toolmark-worker has no --check-config and no --node-id; its loader is the gateway's.
        if name == "worker" and "--node-id" in argv:
            raise Failure("the worker takes no --node-id")
        environment = {k: interpolate(str(v), env) for k, v in (s.get("environment") or {}).items()}
        p = subprocess.run(
            [str(gateway), *argv, "--check-config"],
            env={"PATH": "/usr/bin:/bin", **environment},
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            raise Failure(f"{name}: --check-config exited {p.returncode}: {p.stderr.strip()}")
        verdicts.append(name)
    return f"{', '.join(verdicts)}: configuration is valid"
