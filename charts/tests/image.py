"""The image recipe: hadolint, the packages the Dockerfile builds, its toolchain, and the
build context .dockerignore leaves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness import Failure


def check_dockerfile(repo: Path, hadolint: str | None) -> list[str]:
    """Returns warnings; raises on problems."""
    text = (repo / "Dockerfile").read_text()
    problems, warnings = [], []
    if hadolint:
        p = subprocess.run([hadolint, str(repo / "Dockerfile")], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            problems.append("hadolint: " + (p.stdout + p.stderr).strip())
    else:
        problems.append("hadolint not found")
    toolchain = re.search(r'channel\s*=\s*"([^"]+)"', (repo / "rust-toolchain.toml").read_text()).group(1)
    rust = re.search(r"^ARG RUST_VERSION=(\S+)$", text, re.MULTILINE)
    if not rust or rust.group(1) != toolchain:
        problems.append(f"Dockerfile RUST_VERSION must equal rust-toolchain.toml's {toolchain}")
    build = re.search(r"cargo build --release --locked((?:\s+-p\s+\S+)+)", text)
    wanted = re.findall(r"-p\s+(\S+)", build.group(1)) if build else []
    if sorted(wanted) != ["toolmark-gateway", "toolmark-mcp", "toolmark-worker"]:
        problems.append(f"the image must build toolmark-gateway, toolmark-worker and toolmark-mcp, not {wanted}")
    meta = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked", "--offline"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if meta.returncode != 0:
        problems.append("cargo metadata: " + meta.stderr.strip())
    else:
        packages = json.loads(meta.stdout)["packages"]
        bins = {t["name"] for p in packages for t in p["targets"] if "bin" in t["kind"]}
        for name in wanted:
            if name not in bins:
                warnings.append(f"the Dockerfile builds {name}, which the workspace does not have yet")
        members = [Path(p["manifest_path"]).parent.relative_to(repo).as_posix() for p in packages]
        ignored = dockerignore(repo)
        for needed in [
            "Cargo.toml",
            "Cargo.lock",
            "rust-toolchain.toml",
            *[f"{m}/Cargo.toml" for m in members],
            *[f"{m}/src" for m in members],
        ]:
            if ignored(needed):
                problems.append(f".dockerignore leaves {needed} out of the build context")
        problems += build_context_problems(repo, ignored, members)
    for stage in re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE):
        if "@" not in stage and not re.search(r":\S*[0-9]", stage) and "${" not in stage:
            problems.append(f"base image {stage} is not pinned by version")
    if not re.search(r"^USER\s+[1-9][0-9]*(:[0-9]+)?\s*$", text, re.MULTILINE):
        problems.append("the runtime stage must run as a numeric non-root USER")
    if problems:
        raise Failure("; ".join(problems))
    return warnings


def build_context_problems(repo: Path, ignored, members: list[str]) -> list[str]:
    """Copies what `docker build` would send (the repository's files less .dockerignore),
    checks that no file of a workspace member is left out (sources, include_str! assets) and
    that cargo resolves the locked workspace from that alone."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        return ["git ls-files: " + listed.stderr.strip()]
    with tempfile.TemporaryDirectory(prefix="chart-test-context-") as ctx:
        left_out = []
        for rel in filter(None, listed.stdout.split("\0")):
            if ignored(rel):
                if any(rel.startswith(m + "/") for m in members if m != "."):
                    left_out.append(rel)
                continue
            if not (repo / rel).is_file():
                continue
            (Path(ctx) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, Path(ctx) / rel)
        # Resolving the graph for this host checks Cargo.lock against every manifest.
        meta = subprocess.run(
            ["cargo", "tree", "--workspace", "--locked", "--offline", "--depth", "1", "--prefix", "none"],
            cwd=ctx,
            capture_output=True,
            text=True,
            check=False,
        )
        if left_out:
            return [f".dockerignore leaves workspace files out: {', '.join(left_out[:5])}"]
        if meta.returncode != 0:
            return ["the build context does not resolve: " + meta.stderr.strip()]
    return []


def dockerignore(repo: Path):
    """Docker's rules, enough for this file: patterns with * ** ?, later ! lines re-include."""
    rules = []
    for line in (repo / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        rules.append((negate, re.compile(f"^{regex}(?:/.*)?$")))

    def ignored(path: str) -> bool:
        result = False
        for negate, rx in rules:
            if rx.match(path):
                result = not negate
        return result

    return ignored
