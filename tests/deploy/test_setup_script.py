"""scripts/setup: a rerun on a prepared machine never calls apt-get, sudo or pip; --minimal never needs root.

The script runs for real in a copy of the project whose ``.venv/bin/python`` is a stand-in
that records every call, with ``apt-get``, ``sudo`` and ``pip`` on PATH replaced by stand-ins
that record the call and fail. (bench/setup_reruns.sh does the same 200 times on a checkout.)
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("apt-get", "sudo", "pip", "pip3")
#: What scripts/setup runs besides the tools it checks for.
BASE_TOOLS = (
    "bash",
    "dirname",
    "python3",
    "sha256sum",
    "cut",
    "touch",
    "rm",
    "mktemp",
    "id",
    "grep",
    "tail",
    "sleep",
    "cat",
)


def write_script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's setup with a recording .venv/bin/python."""
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup", root / "scripts" / "setup")
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy2(REPO / "setup.py", root / "setup.py")
    (root / "agent" / "extender").mkdir(parents=True)
    for source in (REPO / "agent" / "extender").glob("_*.[ch]"):
        shutil.copy2(source, root / "agent" / "extender" / source.name)
    write_script(root / ".venv" / "bin" / "python", f'echo "python $*" >> "{tmp_path}/calls.log"')
    write_script(root / ".venv" / "bin" / "helm", "exit 0")  # as scripts/install_helm.py left it
    return root


def shims(directory: Path, calls: Path) -> Path:
    for name in FORBIDDEN:
        write_script(directory / name, f'echo "{name} $*" >> "{calls}"; echo "{name} must not run" >&2; exit 97')
    return directory


def run_setup(project: Path, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(project), "LC_ALL": "C"}
    return subprocess.run(
        ["bash", str(project / "scripts" / "setup"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def calls(project: Path) -> list[str]:
    log = project.parent / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(shutil.which("umockdev-wrapper") is None, reason="needs a prepared machine (scripts/setup)")
def test_reruns_on_a_prepared_machine_call_neither_apt_nor_pip(project: Path, tmp_path: Path) -> None:
    path = f"{shims(tmp_path / 'shims', tmp_path / 'calls.log')}:{os.environ['PATH']}"
    first = run_setup(project, path)
    assert first.returncode == 0, first.stderr
    assert [call.split()[:4] for call in calls(project)] == [
        ["python", "-m", "pip", "install"],
        ["python", "-m", "pip", "install"],
    ]
    (project.parent / "calls.log").unlink()
    for _ in range(20):
        again = run_setup(project, path)
        assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert calls(project) == []


def test_minimal_setup_needs_no_debian_package_and_no_root(project: Path, tmp_path: Path) -> None:
    # A machine with Python and the base tools only: no umockdev, no compiler, no registry.
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    for tool in BASE_TOOLS:
        # python3 itself, not a version manager's shim that needs more tools
        found = str(Path(sys.executable).resolve()) if tool == "python3" else shutil.which(tool)
        assert found is not None, tool
        (bare / tool).symlink_to(found)
    path = f"{shims(tmp_path / 'shims', tmp_path / 'calls.log')}:{bare}"
    minimal = run_setup(project, path, "--minimal")
    assert minimal.returncode == 0, minimal.stderr
    assert [call.split()[:4] for call in calls(project)][-1] == ["python", "-m", "pip", "install"]
    assert calls(project)[-1].endswith("-e .")
    assert not any(call.startswith(FORBIDDEN) for call in calls(project))
    # The full setup on the same machine does want the Debian packages (the stand-in apt-get refuses).
    full = run_setup(project, path)
    assert full.returncode != 0
    assert any(call.startswith(("sudo", "apt-get")) for call in calls(project)), calls(project)


@pytest.mark.skipif(shutil.which("umockdev-wrapper") is None, reason="needs a prepared machine (scripts/setup)")
def test_a_machine_without_helm_gets_it_installed_once(project: Path, tmp_path: Path) -> None:
    (project / ".venv" / "bin" / "helm").unlink()
    without_helm = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "helm").exists()]
    path = os.pathsep.join([str(shims(tmp_path / "shims", tmp_path / "calls.log")), *without_helm])
    first = run_setup(project, path)
    assert first.returncode == 0, first.stderr
    assert calls(project)[-1] == "python scripts/install_helm.py .venv/bin/helm"
    assert "setup: installing helm into .venv/bin" in first.stdout
    write_script(project / ".venv" / "bin" / "helm", "exit 0")
    (project.parent / "calls.log").unlink()
    again = run_setup(project, path)
    assert (again.returncode, again.stdout, again.stderr, calls(project)) == (0, "", "", [])


def test_unknown_argument_is_refused(project: Path) -> None:
    result = run_setup(project, os.environ["PATH"], "--everything")
    assert result.returncode == 2
    assert result.stderr == "usage: scripts/setup [--minimal]\n"
