# Config validation, path helpers and config slices shared by the rule files.
import json
import os
import shlex

import yaml

from snakemake.utils import validate

from arc_pipeline.config_check import check_config
from arc_pipeline.workflow_config import prepare_config

# base: presets, --config types, one-line errors for partial files and typo'd keys (see the module)
with open(os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")) as _schema:
    prepare_config(config, workflow.config_settings.overwrite_config, yaml.safe_load(_schema), workflow.basedir,
                   [str(f) for f in workflow.overwrite_configfiles])
validate(config, schema="../workflow/schemas/config.schema.yaml")
check_config(config)  # every stage's own model: a bad field fails here, before any job starts

wildcard_constraints:
    part=r"\d+",
    shard=r"\d+",
    run=r"[A-Za-z0-9_-]+",
    refiner=r"[A-Za-z0-9_-]+",


RESULTS = config["results_dir"]
PARTS = list(range(1, config["barc"]["split"]["n_parts"] + 1))
SHARDS = list(range(config["inference"]["shards"]))


def result(path):
    return f"{RESULTS}/{path}"


def log_path(path):
    return f"{RESULTS}/logs/{path}.log"


def config_slice(*keys):
    """The JSON of one config section, shell-quoted. Rules pass it in params:, so a change of this
    section (and only this section) reruns the rule."""
    value = config
    for key in keys:
        value = value[key]
    return shlex.quote(json.dumps(value, sort_keys=True))


def merged_slice(*sections):
    """Several sections merged into one JSON object (for stages configured by more than one)."""
    merged = {}
    for keys in sections:
        value = config
        for key in keys:
            value = value[key]
        merged.update(value)
    return shlex.quote(json.dumps(merged, sort_keys=True))


def gpu_resources():
    """HTCondor's request_* names (the plugin reads those) plus `gpus`, which a workstation run limits
    with --resources gpus=N (profiles/workstation); the HTCondor plugin ignores `gpus`."""
    gpu = config["cluster"]["gpu"]
    return {"gpus": gpu["request_gpus"], **{k: v for k, v in gpu.items() if k != "threads"}}


def all_targets():
    return [
        *expand(result("execute/barc/part{part}.metrics.md"), part=PARTS),
        result("train/adapter"),
        result("evaluate/report/runs.md"),
    ]
