"""One way to change a setting: a small file layered over a named preset; one-line config errors.

Dry runs (-n) in a temporary working directory: nothing runs, nothing lands in the repo's results/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arc_pipeline.training.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]
DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
PUBLISHED = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())


def dry_run(workdir: Path, *args: str, targets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CONDOR_CONFIG="/dev/null")
    return subprocess.run(
        [
            str(bin_dir / "snakemake"),
            *targets,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "-n",
            "-p",
            "--cores",
            "1",
            *args,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def stage_config(result: subprocess.CompletedProcess, marker: str) -> dict:
    assert result.returncode == 0, output(result)[-3000:]
    command = next(line for line in (result.stdout + result.stderr).splitlines() if marker in line)
    return json.loads(shlex.split(re.sub(r"^.*?arc-pipeline", "arc-pipeline", command))[-1])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def complete(section: dict) -> dict:
    """A train section as the train job gets it: defaults filled by the model."""
    return TrainConfig.model_validate(section).model_dump(mode="json")


def test_a_file_naming_its_base_changes_only_its_settings(tmp_path: Path) -> None:
    mine = write(tmp_path / "mine.yaml", "base: default\ntrain:\n  max_steps: 5\n")
    training = stage_config(dry_run(tmp_path, "--configfile", str(mine), targets=("train",)), " train --dataset")
    assert training == complete({**DEFAULT["train"], "max_steps": 5})


def test_old_section_names_are_read_under_the_new_ones(tmp_path: Path) -> None:
    mine = write(
        tmp_path / "mine.yaml",
        "base: barc-multiturn\ntraining:\n  max_steps: 5\nevaluation:\n  execution:\n    timeout_s: 3.0\n",
    )
    result = dry_run(tmp_path, "--configfile", str(mine), targets=("train", "evaluate"))
    assert stage_config(result, " train --dataset") == complete({**PUBLISHED["train"], "max_steps": 5})
    assert stage_config(result, " execute --predictions results/barc-multiturn/evaluate/")["timeout_s"] == 3.0
    assert "config section 'training' is now 'train'" in output(result)
    removed = write(tmp_path / "removed.yaml", "base: default\nrefinement:\n  max_prompt_tokens: 8700\n")
    result = dry_run(tmp_path, "--configfile", str(removed))
    assert result.returncode != 0
    assert "refine_dataset.max_prompt_tokens was removed" in output(result)


def test_overrides_after_a_complete_preset(tmp_path: Path) -> None:
    mine = write(tmp_path / "mine.yaml", "train:\n  learning_rate: 3.0e-6\n")
    result = dry_run(
        tmp_path, "--configfile", str(REPO / "config" / "barc-multiturn.yaml"), str(mine), targets=("train",)
    )
    assert stage_config(result, " train --dataset") == complete({**PUBLISHED["train"], "learning_rate": 3.0e-6})


def test_a_partial_file_alone_is_refused_in_one_line(tmp_path: Path) -> None:
    mine = write(tmp_path / "mine.yaml", "train:\n  max_steps: 5\n")
    result = dry_run(tmp_path, "--configfile", str(mine), targets=("train",))
    assert result.returncode != 0
    assert "lacks the sections barc, arc_tasks, model" in output(result) and "base: default" in output(result)
    assert len(output(result).splitlines()) < 10  # not the schema
    assert not (tmp_path / "results").exists()


def test_a_typo_in_a_top_level_key_names_the_closest_key(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--config", "trian={max_steps: 5}")
    assert result.returncode != 0
    assert "unknown top-level config key 'trian'; did you mean 'train'?" in output(result)
    assert len(output(result).splitlines()) < 10


def test_config_values_get_the_schemas_types(tmp_path: Path) -> None:
    result = dry_run(
        tmp_path,
        "--config",
        "evaluate={n_eval: 16}",
        "train={learning_rate: 0.001, use_vllm: false}",
        "barc={download: {revision: 1234}}",
        targets=("results/evaluate/report/runs.md", "results/barc_download/data.jsonl"),
    )
    assert stage_config(result, " inference --tasks results/evaluate/baseline/")["n_predictions"] == 16
    training = stage_config(result, " train --dataset")
    assert training["learning_rate"] == 0.001 and training["use_vllm"] is False
    assert stage_config(result, " barc-download ")["revision"] == "1234"  # a string field stays a string


@pytest.mark.parametrize("adapter", ["missing_adapter", "/nope/adapter"])
def test_a_missing_extra_adapter_fails_at_parse_time(tmp_path: Path, adapter: str) -> None:
    result = dry_run(tmp_path, "--config", f"evaluate={{extra_adapters: {{mine: {adapter}}}}}")
    assert result.returncode != 0
    assert f"evaluate.extra_adapters.mine: adapter folder {adapter} not found" in output(result)
    (tmp_path / "found").mkdir()
    result = dry_run(tmp_path, "--config", "evaluate={extra_adapters: {mine: found}}")
    assert result.returncode == 0, output(result)[-2000:]


def test_a_field_left_out_while_unset_stays_out_of_the_model_rules_params(tmp_path: Path) -> None:
    """Results made before model.*.warmup_canary_weights existed stay up to date: the field is absent from the
    model job's config (its params) unless set, schema validation included. Set over a preset's weights, it
    merges with them key by key, as every mapping does (a weight of 0 drops a program)."""
    result = dry_run(tmp_path, targets=("results/model/base",))
    assert "warmup_canary_weights" not in json.dumps(stage_config(result, " model --tasks"))
    mine = write(
        tmp_path / "mine.yaml",
        "base: canary\nmodel:\n  tiny:\n    warmup_canary_weights: {rot180: 2, flipud: 0}\n",
    )
    result = dry_run(tmp_path, "--configfile", str(mine), targets=("results/canary/model/base",))
    preset = yaml.safe_load((REPO / "config" / "canary.yaml").read_text())["model"]["tiny"]["warmup_canary_weights"]
    expected = {**{name: float(weight) for name, weight in preset.items()}, "rot180": 2.0, "flipud": 0.0}
    assert stage_config(result, " model --tasks")["tiny"]["warmup_canary_weights"] == expected
