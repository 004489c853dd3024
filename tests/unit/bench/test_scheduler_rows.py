"""bench/scheduler.py's table: the extender of another checkout (``--against``) is compared in the same rounds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import bench.scheduler as scheduler
from bench.scheduler import Configuration, summary_rows


def configuration(name: str, rates: list[float], cpu: list[float], checkout: Path | None = None) -> Configuration:
    return Configuration(name, Path(f"{name}.yaml.in"), checkout=checkout, pods_per_s=rates, cpu_ms_per_pod=cpu)


def test_the_other_checkout_is_compared_round_by_round_with_ours_and_the_do_nothing_extender() -> None:
    rows = {
        measure: result
        for measure, result, _target in summary_rows(
            [
                configuration("plain", [200.0] * 5, []),
                configuration("do-nothing extender", [180.0] * 5, [0.2] * 5),
                configuration("fpga-agent extender", [150.0, 160.0, 170.0, 140.0, 150.0], [0.6] * 5),
                configuration("do-nothing extender on uvloop", [190.0, 200.0, 160.0, 175.0, 150.0], [0.1] * 5),
                configuration("extender of old", [120.0, 160.0, 100.0, 140.0, 150.0], [0.8] * 5, Path("old")),
            ]
        )
    }
    assert rows["fpga-agent extender / do-nothing extender"] == "83.3%"
    assert rows["fpga-agent extender / do-nothing extender on uvloop"] == (  # medians 150 and 175
        "85.7%; per round median 80.0%, 90 % interval 78.9%-106.2% (79% 80% 106% 80% 100%)"
    )
    assert rows["do-nothing extender on uvloop / do-nothing extender"].startswith("97.2%; per round median 97.2%")
    assert rows["do-nothing extender on uvloop: CPU per scheduled pod (median of runs)"] == "0.10 ms"
    assert rows["fpga-agent extender / extender of old"] == (  # medians 150 and 140; round by round 150/120, ...
        "107.1%; per round median 100.0%, 90 % interval 100.0%-170.0% (125% 100% 170% 100% 100%)"
    )
    assert rows["extender of old / do-nothing extender, per round"].startswith("median 77.8%")
    assert rows["extender of old: CPU per scheduled pod (median of runs)"] == "0.80 ms"


def test_with_pair_only_the_do_nothing_extender_and_ours_are_compared() -> None:
    rows = {
        measure: (result, target)
        for measure, result, target in summary_rows(
            [
                configuration("do-nothing extender", [180.0, 200.0, 190.0, 170.0, 210.0], [0.2] * 5),
                configuration("fpga-agent extender", [171.0, 194.0, 190.0, 160.0, 210.0], [0.3] * 5),
            ]
        )
    }
    assert rows["fpga-agent extender / do-nothing extender, per round"] == (  # 95 % 97 % 100 % 94.1 % 100 %
        "median 97.0%, 90 % interval 94.1%-100.0% (95% 97% 100% 94% 100%)",
        ">= 95 %",
    )
    assert rows["fpga-agent extender: CPU per scheduled pod (median of runs)"] == ("0.30 ms", "")
    assert not [measure for measure in rows if "plain" in measure or "uvloop" in measure]


def test_probes_and_variants_are_compared_with_the_do_nothing_extender_and_ours() -> None:
    def extra(name: str, rate: float, cpu: float) -> Configuration:
        return Configuration(name, Path(f"{name}.yaml.in"), pods_per_s=[rate] * 5, cpu_ms_per_pod=[cpu] * 5)

    probe = extra("do-nothing extender --answer 16", 190.0, 0.15)
    probe.probe = ["--answer", "16"]
    variant = extra("fpga-agent extender --answer-limit 4", 180.0, 0.25)
    variant.variant = ["--answer-limit", "4"]
    rows = {
        measure: result
        for measure, result, _target in summary_rows(
            [
                configuration("do-nothing extender", [200.0] * 5, [0.1] * 5),
                configuration("fpga-agent extender", [171.0] * 5, [0.3] * 5),
                probe,
                variant,
            ]
        )
    }
    assert rows["do-nothing extender --answer 16 / do-nothing extender"].startswith("95.0%; per round median 95.0%")
    assert rows["fpga-agent extender / do-nothing extender --answer 16"].startswith("90.0%; per round median 90.0%")
    assert rows["do-nothing extender --answer 16: CPU per scheduled pod (median of runs)"] == "0.15 ms"
    assert rows["fpga-agent extender / do-nothing extender"] == "85.5%"  # neither is taken for the floor or ours
    assert rows["fpga-agent extender / fpga-agent extender --answer-limit 4"].startswith(
        "95.0%; per round median 95.0%"
    )
    assert rows["fpga-agent extender --answer-limit 4 / do-nothing extender, per round"].startswith("median 90.0%")
    assert rows["fpga-agent extender --answer-limit 4: CPU per scheduled pod (median of runs)"] == "0.25 ms"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--probe", "answer=16", "--dra-only"], "--probe compares the extender path; it does not go with --dra-only"),
        (
            ["--variant", "--answer-limit 4", "--dra-only"],
            "--variant compares the extender path; it does not go with --dra-only",
        ),
        (["--pair", "--dra-only"], "--pair compares the extender path; it does not go with --dra-only"),
        (["--against", "nowhere"], "--against nowhere: not a checkout of this project (no agent/cli/main.py)"),
        (["--against", ".", "--dra-only"], "--against compares the extender path; it does not go with --dra-only"),
    ],
)
def test_a_wrong_against_is_one_line_before_anything_starts(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    monkeypatch.setattr(sys, "argv", ["scheduler.py", *argv])
    with pytest.raises(SystemExit, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        scheduler.main()


def test_the_other_checkouts_extender_is_the_one_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Started from this checkout (as the bench is), ``python -m agent.cli.main`` must import the other one."""
    cli = tmp_path / "other" / "agent" / "cli"
    cli.mkdir(parents=True)
    for package in (cli.parent, cli):
        (package / "__init__.py").write_text("")
    (cli / "main.py").write_text("import sys\nprint('the other checkout', sys.argv[1:3])\n")
    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # this checkout, with its own agent/cli/main.py
    command, cwd = scheduler.against_command(tmp_path / "other", 18890)
    command[0] = sys.executable  # the interpreter running the tests: the command names .venv's, which pytest may lack
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "the other checkout ['extender', '--kubeconfig']\n"


def test_the_scheduler_and_control_plane_cpu_is_shown_for_every_extender_configuration() -> None:
    noop = configuration("do-nothing extender", [200.0] * 3, [0.1] * 3)
    ours = configuration("fpga-agent extender", [190.0] * 3, [0.2] * 3)
    noop.scheduler_cpu_ms_per_pod, noop.control_plane_cpu_ms_per_pod = [2.0, 2.5, 2.1], [1.0, 1.2, 1.1]
    ours.scheduler_cpu_ms_per_pod, ours.control_plane_cpu_ms_per_pod = [2.2, 2.4, 2.6], [1.3, 1.1, 1.2]
    rows = {measure: result for measure, result, _target in summary_rows([noop, ours])}
    key = ": CPU per pod of the scheduler and pod maker; API server and etcd"
    assert rows["do-nothing extender" + key] == "2.10 ms; 1.10 ms"  # medians
    assert rows["fpga-agent extender" + key] == "2.40 ms; 1.20 ms"


def test_the_cpu_of_a_waited_child_and_its_children_is_counted() -> None:
    before = scheduler.children_cpu_seconds()
    # the grandchild burns half a second of its own CPU, however fast the machine
    spin = "import time\nwhile time.process_time() < 0.5: pass"
    burn = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}], check=True)"
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=120)
    assert scheduler.children_cpu_seconds() - before > 0.4


@pytest.mark.parametrize(
    ("report", "seconds"),
    [
        ('run 1: {"pods": 2000, "bound": 2000, "complete": true, "create_s": 7.31, "pods_per_s": 250.0}\n', 7.31),
        ('watch restart (boom)\nrun 1: {"create_s": 6.5}\nruns pods/s: 250.0\n', 6.5),
        ('run 1: {"pods": 2000}\n', None),
        ("run 1: {not json\n", None),
        ("", None),
    ],
)
def test_the_time_the_pods_took_to_make_is_read_from_sched_benchs_report(report: str, seconds: float | None) -> None:
    assert scheduler.created_seconds(report) == seconds
