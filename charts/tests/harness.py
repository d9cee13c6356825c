"""chart-test plumbing: check results, the two ways of running Helm, rendered documents."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

# Helm allows dots in a release name; the chart must still make valid object names and node ids.
RELEASE = "tm.eu-west-1"
NAMESPACE = "toolmark"


class Failure(Exception):
    """A check that did not hold."""


class Report:
    """Counts checks; prints one line per failure and a closing summary line."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, fn, *args) -> object:
        try:
            result = fn(*args)
        except (Failure, RenderError) as e:
            self.failed += 1
            print(f"FAIL {name}: {e}")
            return None
        self.passed += 1
        print(f"ok   {name}")
        return result


class RenderError(Exception):
    """Helm refused the values or a template failed."""


# --- Helm: the binary or the Go SDK -------------------------------------------------------------


class HelmBinary:
    name = "helm binary"

    def __init__(self, path: str, chart: Path) -> None:
        self.path = path
        self.chart = chart

    def lint(self, values_file: Path) -> list[str]:
        p = subprocess.run(
            [self.path, "lint", "--strict", str(self.chart), "-f", str(values_file)],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            return [p.stdout + p.stderr]
        return []

    def render(self, values_file: Path) -> dict[str, str]:
        p = subprocess.run(
            [self.path, "template", RELEASE, str(self.chart), "--namespace", NAMESPACE, "-f", str(values_file)],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            raise RenderError(p.stderr.strip())
        out: dict[str, str] = {}
        current = None
        for line in p.stdout.splitlines(keepends=True):
            m = re.match(r"^# Source: (.+)$", line)
            if m:
                current = m.group(1).strip()
                out.setdefault(current, "")
                continue
            if current:
                out[current] += line
        return out


class HelmSdk:
    name = "Helm SDK (helm-python-sdk)"

    def __init__(self, chart: Path) -> None:
        import helm_python

        self.helm = helm_python
        self.chart = chart
        self.name = f"Helm SDK {helm_python.helm_sdk_version()} (helm-python-sdk)"

    def lint(self, values_file: Path) -> list[str]:
        values = load_values(values_file)
        report = self.helm.lint(str(self.chart), values, strict=True, namespace=NAMESPACE)
        # Severity 1 is informational (e.g. "icon is recommended"); strict makes warnings count.
        return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]

    def render(self, values_file: Path) -> dict[str, str]:
        values = load_values(values_file)
        try:
            with self.helm.Chart.load(str(self.chart)) as chart:
                return chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        except self.helm.HelmError as e:
            raise RenderError(str(e).strip()) from None


def load_values(path: Path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def documents(rendered: dict[str, str]) -> list[tuple[str, dict]]:
    docs = []
    for source, text in sorted(rendered.items()):
        if source.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append((source, doc))
    return docs
