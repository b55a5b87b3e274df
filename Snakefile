# arc-pipeline: BARC data -> inference -> execution -> refinement dataset -> GRPO -> evaluation.
# Run: snakemake --profile profiles/local (embedded default) or snakemake --profile condor.
import os
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# The embedded default applies only when no --configfile is given: a preset such as
# config/barc-multiturn.yaml is complete on its own and must not inherit the CPU default's values.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "rules/common.smk"
include: "rules/barc_download.smk"
include: "rules/barc_tasks.smk"
include: "rules/barc_split.smk"
include: "rules/arc_tasks.smk"
include: "rules/model.smk"
include: "rules/inference.smk"
include: "rules/execute.smk"
include: "rules/refine_dataset.smk"
include: "rules/sft.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/search.smk"
include: "rules/canary.smk"
include: "rules/benchmarks.smk"


rule all:
    default_target: True
    input:
        all_targets(),


# A local run with --resources gpus=N whose --cores cannot hold N GPU jobs at once says so before it starts
# (the executor is known only once the run starts: cluster runs skip it).
onstart:
    if workflow.local_exec and not workflow.remote_exec:
        from snakemake.logging import logger
        from arc_pipeline.config.cluster import workstation_core_warning

        _gpus = workflow.global_resources.get("gpus")
        _warning = workstation_core_warning(
            int(workflow.cores),
            int(getattr(_gpus, "value", _gpus) or 0),
            WORKFLOW.cluster.gpu.threads,
            workflow.resource_settings.max_threads,
        )
        if _warning:
            logger.warning(_warning)


# The report's home page says what ran (arc_pipeline/report_home.py); written by the main process only.
if not workflow.remote_exec:
    from arc_pipeline.report_home import write_home

    workflow.report(
        str(write_home(WORKFLOW, Path(workflow.basedir), USER_CONFIG, Path(".snakemake/arc-pipeline/report-home.rst")))
    )  # the `report:` keyword
