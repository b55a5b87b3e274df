"""The Snakemake profiles: what a cluster run hands to HTCondor, and that dry runs build the whole DAG.

No HTCondor pool exists here (nor in CI): CONDOR_CONFIG points at /dev/null, so any attempt to reach a
schedd fails at once with "Unable to locate local daemon". The submit descriptions are built by the
plugin's own `run_job` for real jobs of the real workflow and rendered by the real `htcondor2.Submit`.
Each test works on a copy of the workflow in a temporary folder, so no `.snakemake/`, `results/` or
`logs/` of the checkout is touched.
"""

from __future__ import annotations

import os

# Before htcondor2 is imported anywhere in this process: never reach a real pool from a test.
os.environ["CONDOR_CONFIG"] = os.devnull

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import htcondor2
import pytest
import snakemake_executor_plugin_htcondor as htcondor_plugin
import yaml
from snakemake import cli
from snakemake.logging import logger as snakemake_logger
from snakemake.workflow import Workflow
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

from arc_pipeline.config.prepare import deep_merge

htcondor2.reload_config()

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "rules", "config", "workflow", "profiles", "scripts")
PUBLISHED = "config/barc-multiturn.yaml"
GPU_KEYS = ("request_gpus", "request_memory", "request_disk", "gpus_minimum_memory")
# The rules that run on a GPU node; every other rule must ask for no GPU.
GPU_RULES = {"inference", "train", "evaluate_baseline_inference", "evaluate_refinement_inference"}
# a GPU-class job too (a float32 8B merge needs the GPU node's host memory), planned where evaluate.merge_adapter is on
MERGE_RULE = "merge_adapter"
# the search's rounds (evaluate.search): a GPU rule, planned where the search is on
SEARCH_GPU_RULE = "search_inference"
# CPU rules with several threads (from `cluster.cpu.threads`); the rest use one.
CPU_THREADED_RULES = {"execute", "evaluate_execute", "search_execute"}


# --------------------------------------------------------------------------------------------
# helpers


def _copy_workflow(dest: Path) -> Path:
    """Copy what Snakemake reads (Snakefile, rules, config, schemas, profiles) plus the ./condor link."""
    dest.mkdir(parents=True)
    for name in WORKFLOW_PARTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, dest / name)
    link = REPO / "condor"
    assert link.is_symlink(), "./condor must be a symlink to profiles/condor (snakemake --profile condor)"
    os.symlink(os.readlink(link), dest / "condor")
    return dest


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway copy of the workflow, made the current directory (Snakemake resolves from there)."""
    root = _copy_workflow(tmp_path / "repo")
    monkeypatch.chdir(root)
    return root


def _profile(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def _cluster_config(configfile: str | None) -> dict[str, Any]:
    """`cluster:` as Snakemake sees it: the embedded default, updated by the preset (if any)."""
    cluster = yaml.safe_load((REPO / "config/config.yaml").read_text())["cluster"]
    if configfile:
        override = yaml.safe_load((REPO / configfile).read_text()).get("cluster", {})
        for section, values in override.items():
            cluster.setdefault(section, {}).update(values)
    return cluster


def gpu_rules_of(configfile: str | None) -> set[str]:
    """The GPU rules a run of ``configfile`` (None: the embedded default) plans: GPU_RULES, rule merge_adapter
    where the preset merges its adapters for the evaluation, and the search's rounds where it searches."""
    config = workflow_config(configfile)
    return (
        GPU_RULES
        | ({MERGE_RULE} if config.evaluate.merge_adapter else set())
        | ({SEARCH_GPU_RULE} if config.evaluate.search.enabled else set())
    )


def workflow_config(configfile: str | None):
    from arc_pipeline.config.prepare import prepare_config

    path = REPO / (configfile or "config/config.yaml")
    return prepare_config(yaml.safe_load(path.read_text()), {}, REPO, [str(path)])


def _dry_run_in_process(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, executor: str = "htcondor"
) -> tuple[Workflow, Any]:
    """Run `snakemake ARGV` in this process as a cluster run would, but with the dry-run executor.

    `snakemake -n` would cap every job's threads at --cores 1; a real cluster run leaves cores unset,
    so jobs keep their rule's threads (which become request_cpus). We therefore parse the command
    line exactly as for a real run and swap only the executor used by Workflow.execute for the
    dry-run one. Returns the workflow (with its DAG) and the executor settings Snakemake built from
    the profile (its executor must be EXECUTOR)."""
    captured: dict[str, Any] = {}
    original_execute = Workflow.execute
    dryrun_plugin = ExecutorPluginRegistry().get_plugin("dryrun")

    def execute_as_dry_run(self: Workflow, **kwargs: Any) -> Any:
        captured["plugin"] = kwargs["executor_plugin"]
        captured["settings"] = kwargs["executor_settings"]
        kwargs["executor_plugin"] = dryrun_plugin
        kwargs["executor_settings"] = None
        result = original_execute(self, **kwargs)
        captured["workflow"] = self
        return result

    monkeypatch.setattr(Workflow, "execute", execute_as_dry_run)
    parser, args = cli.parse_args(argv)
    assert cli.args_to_api(args, parser), f"snakemake {' '.join(argv)} failed (see the log above)"
    assert captured["plugin"].name == executor, f"the profile must select the {executor} executor"
    return captured["workflow"], captured["settings"]


def _submit_descriptions(
    workflow: Workflow, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, list[htcondor2.Submit]]:
    """Hand every job of the DAG to the plugin's real run_job and keep the Submit it builds, per rule.

    run_job builds the submit description, then asks for the schedd; without a pool that request
    fails, which is where each submission stops."""
    plugin = ExecutorPluginRegistry().get_plugin("htcondor")
    workflow._executor_plugin = plugin
    workflow.executor_settings = settings
    built: list[htcondor2.Submit] = []
    real_submit = htcondor2.Submit

    def recording_submit(description: dict[str, Any]) -> htcondor2.Submit:
        submit = real_submit(description)
        built.append(submit)
        return submit

    monkeypatch.setattr(htcondor_plugin.htcondor, "Submit", recording_submit)
    executor = plugin.executor(workflow, snakemake_logger)
    per_rule: dict[str, list[htcondor2.Submit]] = {}
    try:
        for job in workflow.dag.jobs:
            if job.is_local or job.is_norun:  # never submitted (e.g. `all`)
                continue
            before = len(built)
            with pytest.raises(htcondor2.HTCondorException, match="locate local daemon"):
                executor.run_job(job)
            assert len(built) == before + 1
            per_rule.setdefault(job.rule.name, []).append(built[-1])
    finally:
        executor.shutdown()
    return per_rule


def _job_counts(dry_run_output: str) -> dict[str, int]:
    """The first `Job stats:` table of a dry run, as {rule: count} (without the total)."""
    match = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\ntotal\s+(\d+)", dry_run_output, re.DOTALL)
    assert match, f"no job stats in the dry-run output:\n{dry_run_output[-3000:]}"
    counts = {}
    for line in match.group(1).splitlines():
        rule, count = line.split()
        counts[rule] = int(count)
    assert sum(counts.values()) == int(match.group(2))
    return counts


# --------------------------------------------------------------------------------------------
# profile files and how `--profile` finds them


def test_profile_name_and_path_resolve_to_the_same_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--profile condor` (via the ./condor link) and `--profile profiles/condor` read one file."""
    monkeypatch.chdir(REPO)
    by_name = cli.get_profile_dir("condor")
    by_path = cli.get_profile_dir("profiles/condor")
    assert by_name is not None and by_path is not None
    assert by_name[1].resolve() == by_path[1].resolve() == (REPO / "profiles/condor/config.yaml")
    local = cli.get_profile_dir("profiles/local")
    assert local is not None and local[1].resolve() == REPO / "profiles/local/config.yaml"


def test_no_profile_is_applied_implicitly() -> None:
    """Snakemake applies profiles/default to every run: the repository must not have one."""
    assert not (REPO / "profiles" / "default").exists()


def test_condor_profile_uses_htcondor_resource_names() -> None:
    """The plugin passes only HTCondor's own names; mem_mb, disk_mb, gpu, runtime are ignored."""
    profile = _profile("condor")
    assert profile["executor"] == "htcondor"
    defaults = profile["default-resources"]
    assert {"request_memory", "request_disk"} <= set(defaults)
    assert not {"mem_mb", "disk_mb", "gpu", "runtime", "request_gpus"} & set(defaults)
    assert profile["jobs"] >= 1 and profile["retries"] >= 1


def test_local_profile_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    _, args = cli.parse_args(["--profile", "profiles/local", "-n"])
    assert args.executor in (None, "local")
    assert args.printshellcmds and args.rerun_incomplete and args.show_failed_logs
    assert isinstance(args.cores, int) and args.cores >= 1  # `all` becomes the machine's cores
    assert {t.name.lower() for t in args.rerun_triggers} >= {"mtime", "params", "input", "code"}


# --------------------------------------------------------------------------------------------
# (a) what a cluster run submits


@pytest.mark.parametrize("configfile", [None, PUBLISHED], ids=["default", "barc-multiturn"])
def test_gpu_and_cpu_jobs_render_the_configured_requests(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, configfile: str | None
) -> None:
    argv = ["--profile", "condor"] + (["--configfile", configfile] if configfile else [])
    workflow, settings = _dry_run_in_process(argv, monkeypatch)
    per_rule = _submit_descriptions(workflow, settings, monkeypatch)

    cluster = _cluster_config(configfile)
    gpu, cpu_defaults = cluster["gpu"], _profile("condor")["default-resources"]
    jobdir = _profile("condor")["htcondor-jobdir"]

    gpu_rules = {rule for rule, subs in per_rule.items() if any("request_gpus" in s for s in subs)}
    expected = gpu_rules_of(configfile)
    assert gpu_rules == expected
    assert set(per_rule) - expected, "no CPU job was submitted"
    for rule, submits in per_rule.items():
        for submit in submits:
            rendered = str(submit)
            assert submit["log"] == f"{jobdir}/snakemake-rules.log"
            assert submit["output"].startswith(f"{jobdir}/{rule}/")
            assert submit["getenv"] == "True"
            if rule in expected:
                for key in GPU_KEYS:
                    assert submit[key] == str(gpu[key]), (rule, key)
                    assert f"{key} = {gpu[key]}\n" in rendered
                assert submit["request_cpus"] == str(gpu["threads"])
            else:
                assert "request_gpus" not in submit and "gpus_minimum_memory" not in submit
                assert submit["request_memory"] == str(cpu_defaults["request_memory"])
                assert submit["request_disk"] == str(cpu_defaults["request_disk"])
                threads = cluster["cpu"]["threads"] if rule in CPU_THREADED_RULES else 1
                assert submit["request_cpus"] == str(threads), rule
            # shared filesystem: HTCondor transfers nothing
            assert "transfer_input_files" not in submit and "should_transfer_files" not in submit


def test_train_requests_one_gpu_per_process_and_the_servers(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the 4-GPU preset (docs/cluster.md): a server on 2 GPUs and 2 training processes make 4 GPUs for train; the
    # other GPU jobs keep request_gpus
    argv = ["--profile", "condor", "--configfile", "config/barc-multiturn-4gpu.yaml"]
    workflow, settings = _dry_run_in_process(argv, monkeypatch)
    per_rule = _submit_descriptions(workflow, settings, monkeypatch)
    requested = {rule: {s["request_gpus"] for s in per_rule[rule]} for rule in GPU_RULES}
    assert requested.pop("train") == {"4"}
    assert set().union(*requested.values()) == {"1"}
    (train_job,) = (job for job in workflow.dag.jobs if job.rule.name == "train")
    assert train_job.resources["gpus"] == 4  # what a workstation run (--resources gpus=N) counts


# --------------------------------------------------------------------------------------------
# (b) the whole DAG, as the users type it, without a schedd


def _expected_counts(configfile: str | None) -> dict[str, int]:
    """Jobs per rule for a fresh run, from the config's shape (parts, shards, refiners)."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    if configfile:
        config = deep_merge(config, yaml.safe_load((REPO / configfile).read_text()))
    parts = config["barc"]["split"]["n_parts"]
    shards = config["inference"]["shards"]
    refiners = 2 + len(config["evaluate"]["extra_adapters"])  # base model, trained adapter, extras
    eval_shards = config["evaluate"].get("shards", 1)
    merged = {MERGE_RULE: refiners - 1} if MERGE_RULE in gpu_rules_of(configfile) else {}  # every adapter once
    typed = workflow_config(configfile)
    search = typed.evaluate.search
    # per searching refiner, every round once, but for a first round that is the one-round table's run (64 + 64)
    one_round = (typed.evaluate.first_predictions, typed.evaluate.refinement_prompts * typed.inference.n)
    rounds = {tuple(s[: r + 1]) for s in search.schedules for r in range(1, len(s))} - {one_round}
    searched = refiners * len(rounds) if search.enabled else 0
    searching = {"search_prompts": searched, SEARCH_GPU_RULE: searched, "search_execute": searched, "search": 1}
    return (
        merged
        | (searching if search.enabled else {})
        | {
            "barc_download": 1,
            "barc_tasks": 1,
            "barc_split": parts,
            "model": 1,
            "inference_shard_tasks": parts * shards,
            "inference": parts * shards,
            "inference_gather": parts,
            "execute": parts,
            "refine_dataset": 1,
            "train": 1,
            "arc_tasks": 1,
            "evaluate_baseline_shard_tasks": eval_shards,
            "evaluate_baseline_inference": eval_shards,
            "evaluate_baseline_gather": 1,
            "evaluate_refine_prompts": 1,
            "evaluate_refinement_inference": refiners,
            "evaluate_execute": 1 + refiners,  # the baseline and each refiner
            "evaluate": 1,
            "benchmark_summary": 1,
            "all": 1,
        }
    )


@pytest.mark.parametrize(
    ("profile", "configfile"),
    [("condor", None), ("condor", PUBLISHED), ("profiles/condor", None)],
    ids=["default", "barc-multiturn", "profile-by-path"],
)
def test_dry_run_builds_the_whole_dag_without_a_schedd(workdir: Path, profile: str, configfile: str | None) -> None:
    argv = [sys.executable, "-m", "snakemake", "-n", "--profile", profile]
    if configfile:
        argv += ["--configfile", configfile]
    env = {**os.environ, "CONDOR_CONFIG": os.devnull}
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Using profile" in output
    counts = _job_counts(output)
    expected = _expected_counts(configfile)
    assert counts == expected
    # No submission was attempted: the plugin's executor (which creates its job folder at once)
    # was never built, and nothing asked for a schedd (which fails here at once).
    assert not (workdir / _profile("condor")["htcondor-jobdir"]).exists()
    assert "locate local daemon" not in output
