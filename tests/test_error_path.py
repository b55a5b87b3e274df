"""One error path: every command turns a missing input or a bad ``--config-json`` into one line.

Each command runs as the real CLI in a subprocess, as Snakemake and a user run it. A user-fixable
problem (arc_pipeline/errors.py) must end with ``arc-pipeline <command>: <message>`` naming the file or
the field, exit status 1 and no traceback. ``CASES`` must cover every command of ``cli.COMMANDS``: a new
command fails ``test_every_command_is_covered`` until it is added here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arc_pipeline.cli import COMMANDS


@dataclass(frozen=True)
class Case:
    """A command run whose one input is missing: ``{missing}`` (the missing file), ``{model}`` (a model folder
    that passes the folder check, so the missing input is what fails) and ``{out}`` (an output folder) are
    filled in. ``config`` is the ``--config-json`` that goes with it; None: the command takes none."""

    args: tuple[str, ...]
    config: dict | None = field(default_factory=dict)


# command -> how it meets a missing input; None: the command reads no input and takes no --config-json.
CASES: dict[str, Case | None] = {
    "barc-download": Case(("--output", "{out}/data.jsonl"), {"source": "local", "local_path": "{missing}"}),
    "barc-tasks": Case(("--input", "{missing}", "--output", "{out}/tasks.parquet")),
    "barc-split": Case(("--tasks", "{missing}", "--part", "1", "--output", "{out}/part.parquet")),
    "arc-tasks": Case(("--output", "{out}/tasks.parquet"), {"source": "kaggle", "challenges_path": "{missing}"}),
    # a source that builds its tokenizer from --tasks
    "model": Case(("--tasks", "{missing}", "--output", "{out}/model"), {"source": "tiny"}),
    "shard": Case(("--tasks", "{missing}", "--index", "0", "--count", "1", "--output", "{out}/shard.parquet"), None),
    "inference": Case(("--tasks", "{missing}", "--model", "{model}", "--output", "{out}/predictions.parquet")),
    "gather": Case(("--inputs", "{missing}", "--output", "{out}/all.parquet", "--schema", "tasks"), None),
    "execute": Case(
        (
            "--predictions",
            "{missing}",
            "--tasks",
            "{missing}",
            "--executions",
            "{out}/e.parquet",
            "--metrics",
            "{out}/m.parquet",
            "--metrics-md",
            "{out}/m.md",
            "--errors",
            "{out}/x.parquet",
            "--errors-md",
            "{out}/x.md",
        )
    ),
    "refine-dataset": Case(
        (
            "--tasks",
            "{missing}",
            "--predictions",
            "{missing}",
            "--executions",
            "{missing}",
            "--model",
            "{model}",
            "--output",
            "{out}/refine.parquet",
        )
    ),
    "train": Case(
        (
            "--dataset",
            "{missing}",
            "--model",
            "{model}",
            "--output",
            "{out}/adapter",
            "--metrics",
            "{out}/metrics.parquet",
        )
    ),
    "refine-prompts": Case(
        (
            "--tasks",
            "{missing}",
            "--predictions",
            "{missing}",
            "--executions",
            "{missing}",
            "--model",
            "{model}",
            "--first-predictions",
            "1",
            "--output",
            "{out}/prompts.parquet",
        )
    ),
    "search-prompts": Case(
        (
            "--tasks",
            "{missing}",
            "--predictions",
            "{missing}",
            "--executions",
            "{missing}",
            "--initial",
            "1",
            "--model",
            "{model}",
            "--output",
            "{out}/prompts.parquet",
        ),
        {"round": 1},
    ),
    "search": Case(
        (
            "--tasks",
            "{missing}",
            "--baseline-predictions",
            "{missing}",
            "--baseline",
            "{missing}",
            "--rounds",
            "rl:1+1:{missing}",
            "--output-dir",
            "{out}/report",
        )
    ),
    "evaluate": Case(
        (
            "--tasks",
            "{missing}",
            "--baseline-predictions",
            "{missing}",
            "--baseline",
            "{missing}",
            "--output-dir",
            "{out}/report",
        )
    ),
    "canary": Case(
        (
            "--training-metrics",
            "{missing}",
            "--tasks",
            "{missing}",
            "--reward-metric",
            "rewards/arc-v2-no-pixel-score/mean",
            "--output-dir",
            "{out}/canary",
        )
    ),
    "benchmark-summary": Case(
        ("--benchmarks", "{missing}", "--output-md", "{out}/s.md", "--output-html", "{out}/s.html"), None
    ),
    "inspect": Case(("{missing}",), None),
    "merge-adapter": Case(("--model", "{model}", "--adapter", "{missing}", "--output", "{out}/merged")),
    "sft-dataset": Case(
        (
            "--refinements",
            "{missing}",
            "--predictions",
            "{missing}",
            "--executions",
            "{missing}",
            "--output",
            "{out}/sft.parquet",
            "--summary",
            "{out}/summary.json",
        )
    ),
    "sft": Case(
        ("--dataset", "{missing}", "--model", "{model}", "--output", "{out}/adapter", "--metrics", "{out}/m.parquet")
    ),
    "config-reference": None,  # writes the reference from the models: no input file, no --config-json
}
STAGES_WITH_INPUTS = [name for name, case in CASES.items() if case is not None]
STAGES_WITH_CONFIG = [name for name, case in CASES.items() if case is not None and case.config is not None]


def test_every_command_is_covered() -> None:
    assert set(CASES) == set(COMMANDS), "add the new command to CASES: how it meets a missing input"


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    # A folder with the files the model-folder check looks for: the stage gets past it to its inputs.
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    return {"missing": str(tmp_path / "nowhere" / "input.parquet"), "model": str(model), "out": str(tmp_path / "out")}


def command_line(command: str, case: Case, paths: dict[str, str], config_json: str | None = None) -> list[str]:
    args = [arg.format(**paths) for arg in case.args]
    if config_json is None and case.config is not None:
        config_json = json.dumps(
            {key: value.format(**paths) if isinstance(value, str) else value for key, value in case.config.items()}
        )
    if config_json is not None:
        args += ["--config-json", config_json]
    return [sys.executable, "-m", "arc_pipeline.cli", command, *args]


def error_message(command: str, argv: list[str]) -> str:
    """The message of the command's one error line (with any continuation lines), after checking the rest."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    prefix = f"arc-pipeline {command}: "
    lines = result.stderr.rstrip("\n").splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(prefix)]
    assert starts, result.stderr
    return "\n".join(lines[starts[-1] :])[len(prefix) :]


@pytest.mark.parametrize("command", STAGES_WITH_INPUTS)
def test_missing_input_is_one_line_naming_the_file(command: str, paths: dict[str, str]) -> None:
    message = error_message(command, command_line(command, CASES[command], paths))
    assert "\n" not in message
    assert paths["missing"] in message and "not found" in message


@pytest.mark.parametrize("command", STAGES_WITH_CONFIG)
def test_config_json_that_is_not_json_is_one_line(command: str, paths: dict[str, str]) -> None:
    message = error_message(command, command_line(command, CASES[command], paths, config_json="{source: tiny"))
    assert "\n" not in message and "--config-json is not valid JSON" in message


@pytest.mark.parametrize("command", STAGES_WITH_CONFIG)
def test_unknown_config_field_is_named(command: str, paths: dict[str, str]) -> None:
    message = error_message(command, command_line(command, CASES[command], paths, config_json='{"no_such_field": 1}'))
    assert "no_such_field" in message


def test_with_a_log_file_the_line_also_lands_in_the_log(paths: dict[str, str], tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "shard.log"
    argv = command_line("shard", CASES["shard"], paths)
    argv[3:3] = ["--log-file", str(log_file)]  # a global option, before the command
    message = error_message("shard", argv)
    line = f"arc-pipeline shard: {message}"
    assert paths["missing"] in message
    log = log_file.read_text()
    assert log.rstrip("\n").splitlines()[-1] == line and "Traceback" not in log
