"""The report's home page says what ran, from what the results folder records; it is valid rst."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from docutils.core import publish_parts

from arc_pipeline.report_home import render_home, write_home

REPO = Path(__file__).resolve().parents[2]


def test_home_page_names_preset_model_adapter_dates_code_and_machine(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())
    config["results_dir"] = "results"
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
        "outputs written 20",
        "commit ",
        "(the one building this report)",
    ):
        assert expected in text, expected
    html = publish_parts(text, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})
    assert "<table" in html["body"]


def test_before_anything_ran_it_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    path = write_home(config, REPO, [], tmp_path / ".snakemake" / "home.rst")
    text = path.read_text()
    assert "embedded default" in text and "not trained yet" in text and "no outputs yet" in text
