"""The Dockerfile, read statically (no container engine here): stages, final image contents, entry point.

And the wheel the build stage makes, built here the same way: it carries the generated
protocol code and the ``fpga-agent`` command the image runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.manifests import REPO, Manifests, containers, render

DOCKERFILE = REPO / "Dockerfile"
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|make|cmake|build-essential|[a-z0-9.+-]+-dev|python3?-dev|git|curl|wget)\b"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, each with its (KEYWORD, arguments) instructions."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.IGNORECASE)
            assert match, line
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], match.group(1))
            stages.append(Stage(base, match.group(2)))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest.strip()))
    return args, stages


ARGS, STAGES = parse_dockerfile(DOCKERFILE.read_text())
FINAL = STAGES[-1]


def test_two_stages_build_then_runtime() -> None:
    assert len(STAGES) == 2
    build, runtime = STAGES
    assert build.name == "build"
    assert any("pip wheel" in run for run in build.all("RUN"))
    assert runtime.base == build.base  # the wheels are built for the Python they run on


def test_the_base_is_a_slim_python_the_project_supports() -> None:
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", FINAL.base)
    version = tuple(int(part) for part in FINAL.base.split(":")[1].split("-")[0].split("."))
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    assert version >= (3, 11)
    assert version == sys.version_info[:2]  # the Python the tests run on


def test_the_final_stage_takes_only_what_the_build_stage_installed_from_its_wheels() -> None:
    build, _runtime = STAGES
    installs = r"/opt/fpga-slot/bin/python -m pip install --no-index --find-links /wheels fpga-slot\b"
    assert re.search(installs, " ".join(build.all("RUN")))
    assert "/opt/fpga-slot/bin/python -m pip uninstall -y pip setuptools wheel" in " ".join(build.all("RUN"))
    # A COPY is cached by content: a changed package always reaches the image (no source tree, no wheels).
    assert FINAL.all("COPY") == ["--from=build /opt/fpga-slot /opt/fpga-slot"]
    assert FINAL.all("ENV")[-1] == "PATH=/opt/fpga-slot/bin:$PATH"
    assert "pip uninstall -y pip setuptools wheel" in " ".join(FINAL.all("RUN"))
    assert not any("--mount" in run for run in FINAL.all("RUN"))
    assert not FINAL.all("ADD")


def test_the_final_stage_has_no_build_tools() -> None:
    for run in FINAL.all("RUN"):
        for package in re.findall(r"apt-get install [^&]*", run):
            names = [word for word in package.split()[2:] if not word.startswith("-")]
            assert names == ["libudev1"], names  # what pyudev loads at run time, nothing to build with
            assert not BUILD_TOOLS.search(" ".join(names))
    assert not BUILD_TOOLS.search(FINAL.base)


def test_entrypoint_is_the_cli_and_the_default_command_runs_the_agent() -> None:
    (entrypoint,) = FINAL.all("ENTRYPOINT")
    (command,) = FINAL.all("CMD")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert json.loads(entrypoint) == ["fpga-agent"]
    assert scripts["fpga-agent"] == "agent.cli.main:main"
    assert json.loads(command) == ["run"]


def test_the_same_image_runs_agent_and_extender_as_the_manifests_say() -> None:
    manifests = Manifests(render())
    agent = next(containers(manifests.get("DaemonSet", "fpga-slot-agent", "fpga-slot")))
    extender = next(containers(manifests.get("Deployment", "fpga-slot-extender", "fpga-slot")))
    assert agent["image"] == extender["image"]
    assert (agent["args"], extender["args"]) == (["run"], ["extender"])


def test_runs_unprivileged_unless_told_and_says_why_the_agent_is_root() -> None:
    (user,) = FINAL.all("USER")
    assert user.split(":")[0] not in ("0", "root")
    text = DOCKERFILE.read_text()
    assert "runAsUser: 0" in text
    assert "privileged" in text


def test_the_build_context_is_the_package_source_only() -> None:
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [line for line in ignore if line and not line.startswith("#")]
    assert rules[0] == "*"  # everything out (.venv, .git, tests, caches) ...
    assert {"!pyproject.toml", "!setup.py", "!README.md", "!agent/"} <= set(rules)  # ... but what the wheel is
    assert "**/*.so" in rules  # built from; a compiled module built in place here is built anew there
    copies = [args.split()[:-1] for stage in STAGES for args in stage.all("COPY") if "--from" not in args]
    copied = [source for sources in copies for source in sources]
    assert set(copied) <= {"pyproject.toml", "setup.py", "README.md", "agent"}


def test_the_wheel_carries_the_protocol_code_and_the_command(tmp_path: Path) -> None:
    """Built as the build stage builds it, from a copy of exactly the files the context holds."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    shutil.copytree(REPO / "agent", source / "agent", ignore=ignored)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("fpga_slot-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for required in (
        "agent/py.typed",
        "agent/cli/main.py",
        "agent/_proto/deviceplugin/v1beta1/api_pb2.py",
        "agent/_proto/podresources/v1/api_pb2_grpc.py",
    ):
        assert required in names
    assert not any(name.endswith((".so", ".c", ".h")) for name in names)  # no compiled part: Python only
    assert not any(name.startswith("tests/") for name in names)
    assert "fpga-agent = agent.cli.main:main" in entry_points
