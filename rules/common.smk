# Config validation, path helpers and config slices shared by the rule files.
import hashlib
import json
import os
from pathlib import Path
import shlex

import yaml

from snakemake.utils import validate

from arc_pipeline.config.cluster import gpu_job_resources, train_job_gpus
from arc_pipeline.config.prepare import prepare_config

# base: presets, old section names, --config types, one-line errors (see the module). The config comes back
# complete, defaults included, checked by every stage's own model before any job starts; WORKFLOW is it, typed.
WORKFLOW = prepare_config(
    config,
    workflow.config_settings.overwrite_config,
    workflow.basedir,
    [str(f) for f in workflow.overwrite_configfiles],
)
# The schema is generated from the same models, which already filled every default: adding the schema's
# defaults again would put fields left out while unset (model.tiny.warmup_canary_weights) into params.
validate(config, schema="../workflow/schemas/config.schema.yaml", set_default=False)

# Jobs spawned by an executor plugin re-read --config from their command line, and the HTCondor plugin
# strips quotes and splits at spaces ('evaluation={n_eval: 16}' arrives as two broken words). So jobs
# get the parsed config as one file instead (same values, so same params and DAG).
_config_args = workflow.config_settings.config_args or []
# what the user gave, for the report's home page (before the rewrite below)
USER_CONFIG = [str(f) for f in workflow.overwrite_configfiles] + [f"--config {arg}" for arg in _config_args]
if not workflow.remote_exec and any(any(c.isspace() for c in str(arg)) for arg in _config_args):
    _jobs_config = yaml.safe_dump(dict(config), sort_keys=True)
    _jobs_configfile = os.path.abspath(
        f".snakemake/arc-pipeline/config-{hashlib.sha256(_jobs_config.encode()).hexdigest()[:16]}.yaml"
    )
    os.makedirs(os.path.dirname(_jobs_configfile), exist_ok=True)
    with open(_jobs_configfile, "w") as _handle:
        _handle.write(_jobs_config)
    workflow.config_settings.configfiles = [Path(_jobs_configfile)]
    workflow.config_settings.config_args = []


wildcard_constraints:
    part=r"\d+",
    shard=r"\d+",
    run=r"[A-Za-z0-9_-]+",
    refiner=r"[A-Za-z0-9_-]+",


RESULTS = WORKFLOW.results_dir
# GPU stages share one compile cache (arc_pipeline/generation/compile_cache.py); on the command line, not in
# params: moving the cache reruns nothing.
GPU_STAGE = "arc-pipeline --compile-cache " + shlex.quote(
    WORKFLOW.cluster.compile_cache_dir or f"{RESULTS}/compile-cache"
)
PARTS = list(range(1, WORKFLOW.barc.split.n_parts + 1))
SHARDS = list(range(WORKFLOW.inference.shards))


def result(path):
    return f"{RESULTS}/{path}"


def log_path(path):
    return f"{RESULTS}/logs/{path}.log"


def benchmark_path(rule_name, job=None):
    """Snakemake's measurement of one job (wall time, peak RSS of its processes, CPU time):
    results/benchmarks/<rule>[/<job>].tsv, where <job> spells the wildcards. rule benchmark_summary gathers them."""
    return f"{RESULTS}/benchmarks/{rule_name}{'/' + job if job else ''}.tsv"


def gpu_memory_path(rule_name, job=None):
    """The peak GPU memory of a GPU job, beside its benchmark file (arc-pipeline --gpu-memory-file)."""
    return benchmark_path(rule_name, job).removesuffix(".tsv") + ".gpu.json"


def config_slice(*keys):
    """The JSON of one config section, shell-quoted. Rules pass it in params:, so a change of this
    section (and only this section) reruns the rule."""
    value = config
    for key in keys:
        value = value[key]
    return shlex.quote(json.dumps(value, sort_keys=True))


def gpu_resources():
    """One set of names for every executor: HTCondor's request_*, Slurm's gpu/mem_mb/runtime/slurm_partition,
    and `gpus`, which a workstation run limits with --resources gpus=N (arc_pipeline/config/cluster.py)."""
    return gpu_job_resources(WORKFLOW.cluster.gpu)


def train_gpu_resources():
    """gpu_resources() with the train job's own GPU count: train.vllm_server_gpus (server mode) plus
    train.training_processes (docs/multi-gpu.md)."""
    return gpu_job_resources(WORKFLOW.cluster.gpu, train_job_gpus(WORKFLOW.train, WORKFLOW.cluster.gpu))


def final_outputs():
    """What the workflow is run for; every job of the DAG is upstream of these."""
    return [
        *expand(result("execute/barc/part{part}.metrics.md"), part=PARTS),
        result("train/adapter"),
        result("evaluate/report/runs.md"),
        *([result("evaluate/report/search.md")] if WORKFLOW.evaluate.search.enabled else []),
        *([result("canary/verdict.md")] if WORKFLOW.canary.enabled else []),
        *([result("sft/adapter")] if WORKFLOW.sft.enabled else []),
    ]


def all_targets():
    """The final outputs and the time and memory table of the jobs that made them (rules/benchmarks.smk)."""
    return [*final_outputs(), result("benchmarks/summary.md")]
