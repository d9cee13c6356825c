"""The chart README's table of values, made from values.yaml: every value with its default and
the comment above it. `make chart-test` fails when the README's table is not the one this
makes; `target/chart-test/venv/bin/python charts/tests/values_doc.py --write` rewrites it (PyYAML).

values.yaml is read line by line (a YAML parser drops the comments): a key's description is
the block of `# ` comment lines right above it at its indentation; commented-out examples
(`#  - id: …`) and section comments separated by a blank line describe nothing."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

START = "<!-- values:start (generated from values.yaml by charts/tests/values_doc.py) -->"
END = "<!-- values:end -->"
KEY = re.compile(r"^( *)([A-Za-z0-9_]+):(?: (.*))?$")


def comments(values: str) -> dict[str, str]:
    """Key path → the comment block right above the key."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in values.splitlines():
        stripped = line.strip()
        if not stripped:
            block = []
            continue
        if stripped.startswith("#"):
            text = stripped[1:]
            # "# text" is prose; "#  - id:" or "#key: x" is a commented-out example.
            if text.startswith(" ") and not text.startswith("  "):
                block.append(text.strip())
            else:
                block = []
            continue
        m = KEY.match(line)
        if m:
            indent, key = len(m.group(1)), m.group(2)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            if block:
                out[".".join(k for _, k in stack)] = " ".join(block)
        block = []
    return out


def rows(values: str) -> list[tuple[str, str, str]]:
    """(path, default, description) of every value: scalars, lists and empty maps."""
    described = comments(values)
    out = []

    def walk(node: dict, at: str) -> None:
        for key, value in node.items():
            path = f"{at}.{key}" if at else key
            if isinstance(value, dict) and value:
                walk(value, path)
            else:
                out.append((path, json.dumps(value, ensure_ascii=False), described.get(path, "")))

    walk(yaml.safe_load(values) or {}, "")
    return out


def table(values: str) -> str:
    lines = [START, "", "| value | default | description |", "|---|---|---|"]
    for path, default, text in rows(values):
        cell = text.replace("|", "\\|")
        shown = default.replace("|", "\\|")
        lines.append(f"| `{path}` | `{shown}` | {cell} |")
    lines += ["", END]
    return "\n".join(lines)


def expected_readme(readme: str, values: str) -> str:
    before, sep, rest = readme.partition(START)
    if not sep:
        return readme.rstrip("\n") + "\n\n## Values\n\n" + table(values) + "\n"
    _, sep, after = rest.partition(END)
    if not sep:
        raise SystemExit(f"the README has {START!r} but no {END!r}")
    return before + table(values) + after


def check(chart: Path) -> str | None:
    """None when the README's table is current, else what to run."""
    readme = (chart / "README.md").read_text()
    want = expected_readme(readme, (chart / "values.yaml").read_text())
    if readme != want:
        return "charts/toolmark/README.md's table of values is stale: run target/chart-test/venv/bin/python charts/tests/values_doc.py --write"
    return None


if __name__ == "__main__":
    chart = Path(__file__).resolve().parent.parent / "toolmark"
    if "--write" in sys.argv:
        readme = chart / "README.md"
        readme.write_text(expected_readme(readme.read_text(), (chart / "values.yaml").read_text()))
    else:
        problem = check(chart)
        if problem:
            raise SystemExit(problem)
