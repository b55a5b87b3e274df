"""The cluster's edges: `--config` values with spaces reach HTCondor jobs intact (the plugin strips quotes,
HTCondor splits at spaces; a real submit description is rendered by the plugin and read back as HTCondor
would), and the hub downloads run on the submit machine."""

from __future__ import annotations

import os

os.environ["CONDOR_CONFIG"] = os.devnull  # before htcondor2 is imported: never reach a real pool

from pathlib import Path

import pytest
import yaml

from tests.test_profiles import _dry_run_in_process, _submit_descriptions, workdir  # noqa: F401


def test_config_values_with_spaces_survive_the_submit_description(
    workdir: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["--profile", "condor", "--config", "evaluate={n_eval: 16}", "inference={temperature: 0.7}"]
    workflow, settings = _dry_run_in_process(argv, monkeypatch)
    per_rule = _submit_descriptions(workflow, settings, monkeypatch)
    for rule in ("train", "inference", "evaluate_baseline_inference"):
        rendered = str(per_rule[rule][0])
        line = next(x for x in rendered.splitlines() if x.startswith("arguments = "))
        words = line.removeprefix("arguments = ").split()  # HTCondor's old argument syntax: whitespace
        assert "--config" not in words  # the broken 'evaluate={n_eval:' '16}' pair is gone
        configfiles = words[words.index("--configfiles") + 1 :]
        configfiles = configfiles[: next(i for i, w in enumerate(configfiles) if w.startswith("--"))]
        job_config: dict = {}
        for path in configfiles:
            job_config.update(yaml.safe_load(Path(path).read_text()))
        assert job_config["evaluate"]["n_eval"] == 16 and job_config["inference"]["temperature"] == 0.7
        assert job_config == dict(workflow.config)  # the job plans with exactly the submitting run's config


@pytest.mark.parametrize("configfile", [None, "config/barc-multiturn.yaml"], ids=["default", "barc-multiturn"])
def test_downloads_run_on_the_submit_machine(
    workdir: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    configfile: str | None,
) -> None:
    """Execute nodes often have no internet: the hub downloads are local rules; building a model is a job."""
    argv = ["--profile", "condor"] + (["--configfile", configfile] if configfile else [])
    workflow, _ = _dry_run_in_process(argv, monkeypatch)
    local = set(workflow._localrules)  # job.is_local is True for every job of a dry run
    assert "barc_download" in local
    assert ("model" in local) == (workflow.config["model"]["source"] in ("hub", "path"))
    assert configfile is None or "model" in local  # the published preset downloads the 8B model


def test_baseline_evaluation_is_sharded_and_gathered(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """One GPU job per shard of the evaluation tasks (a killed run redoes only unfinished shards)."""
    workflow, _ = _dry_run_in_process(["--profile", "condor", "--config", "evaluate={shards: 3}"], monkeypatch)
    jobs = [job for job in workflow.dag.jobs if job.rule.name.startswith("evaluate_baseline")]
    counts = {name: sum(job.rule.name == name for job in jobs) for name in {job.rule.name for job in jobs}}
    assert counts == {
        "evaluate_baseline_shard_tasks": 3,
        "evaluate_baseline_inference": 3,
        "evaluate_baseline_gather": 1,
    }
    shells = sorted(
        job.format_wildcards(job.rule.shellcmd) for job in jobs if job.rule.name == "evaluate_baseline_shard_tasks"
    )
    assert all("--count 3" in cmd for cmd in shells)
    assert [f"--index {i}" in cmd for i, cmd in enumerate(shells)] == [True] * 3
