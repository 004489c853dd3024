"""The README and docs/ as a reader follows them: a short README, links that lead somewhere, every
``fpga-agent`` command line in a code block accepted by the command line as it is, the README's list of
subcommands and the docs' error tree as the code has them."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from agent import errors
from agent.cli.main import build_parser
from agent.config import load_config

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: Pages written alongside this one; the README links them already.
COMING = {"docs/security.md", "docs/bitstream-artifacts.md", "docs/command-programmer.md", "docs/dra.md"}
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
FENCE = re.compile(r"```(?:sh|bash)\n(.*?)```", re.DOTALL)


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) < 200


def test_the_reference_pages_exist() -> None:
    names = {page.name for page in PAGES}
    assert {"configuration.md", "metrics.md", "scoring.md", "distribution.md", "operations.md"} <= names
    assert {"development.md", "how-it-works.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_lead_to_files(page: Path) -> None:
    for target, _anchor in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        resolved = (page.parent / target).resolve()
        if str(resolved.relative_to(REPO)) in COMING:
            continue
        assert resolved.exists(), f"{page_id(page)} links to {target}, which does not exist"


def command_lines(text: str) -> list[str]:
    """The ``fpga-agent ...`` commands in the page's shell blocks, continuation lines joined."""
    commands: list[str] = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            start = line.find("fpga-agent ")
            if start < 0 or line[:start].rstrip().endswith(("#", "`")):
                continue
            command = re.split(r"\s(?:\||#|&|>)", line[start:])[0]
            commands.append(" ".join(command.split()))
    return commands


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_fpga_agent_command_in_the_page_parses(page: Path) -> None:
    for command in command_lines(page.read_text()):
        words = shlex.split(command)[1:]
        try:
            build_parser().parse_args(words)
        except SystemExit as exc:
            if exc.code == 0:  # --help, --version
                continue
            pytest.fail(f"{page_id(page)}: `{command}` is refused (exit {exc.code})")


def test_the_pages_carry_no_internal_issue_numbers() -> None:
    for page in PAGES:
        text = page.read_text()
        assert not re.search(r"\(issue \d+\)|\(#\d+\)", text), page_id(page)
        assert "busybox:1.36" not in text, page_id(page)


def test_commands_are_found() -> None:
    text = "```sh\nfpga-agent catalog add x.bin --name a \\\n    --replace   # comment\nls | fpga-agent cluster\n```\n"
    assert command_lines(text) == ["fpga-agent catalog add x.bin --name a --replace", "fpga-agent cluster"]


def test_the_example_configuration_file_loads(tmp_path: Path) -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    (example,) = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    path = tmp_path / "fpga-agent.yaml"
    path.write_text(example)
    config = load_config({"config": str(path)}, env={})
    assert (config.backend, config.log_format) == ("auto", "json")
    assert [spec.card for spec in config.static_slots] == ["board0"]


def cli_subcommands() -> list[str]:
    """The subcommands of the real parser, in its order."""
    (commands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return list(commands.choices)


def test_the_readmes_subcommand_list_is_the_clis() -> None:
    listed = re.findall(r"^fpga-agent --help\s+#\s*(.+)$", (REPO / "README.md").read_text(), re.MULTILINE)
    assert len(listed) == 1, "README.md: one `fpga-agent --help  # <subcommands>` line"
    assert [name.strip() for name in listed[0].split(",")] == cli_subcommands()


def error_tree(text: str) -> dict[str, str]:
    """The drawing of docs/development.md's "The error tree": each class and the class it sits under."""
    blocks = re.findall(r"### The error tree\n.*?```text\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 1, "one ```text block under a heading '### The error tree'"
    block = blocks[0]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.match(r"^([│ ]*(?:[├└]── )?)(\w+)", line)
        assert match, f"not a line of the tree: {line!r}"
        depth, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else ""
        stack.append((depth, name))
    return parents


def test_the_error_tree_in_the_docs_is_the_code_s() -> None:
    drawn = error_tree((REPO / "docs" / "development.md").read_text())
    classes = {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.FpgaSlotError)
    }
    assert sorted(drawn) == sorted(classes)
    for name, error in classes.items():
        assert drawn[name] == (error.__bases__[0].__name__ if error is not errors.FpgaSlotError else ""), name


def test_the_error_tree_is_read_by_its_indentation() -> None:
    text = "### The error tree\n\n```text\nA\n├── B      b\n│   └── C  c\n└── D      d\n```\n"
    assert error_tree(text) == {"A": "", "B": "A", "C": "B", "D": "A"}


def test_bench_results_hold_current_figures_and_nothing_cites_committed_logs() -> None:
    assert len((REPO / "bench" / "RESULTS.md").read_text().splitlines()) <= 300
    texts = [*PAGES, REPO / "bench" / "RESULTS.md", *sorted((REPO / "bench").glob("*.py"))]
    citing = [page_id(path) for path in texts if "bench/logs" in path.read_text()]
    assert not citing, f"these cite bench/logs/, which is not committed (results go to bench/RESULTS.md): {citing}"
