# arc-pipeline: BARC data -> inference -> execution -> refinement dataset -> GRPO -> evaluation.
# Run: snakemake --profile profiles/local (embedded default) or snakemake --profile condor.
import os

from snakemake.utils import min_version

min_version("9.0")


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
include: "rules/train.smk"
include: "rules/evaluate.smk"


rule all:
    input:
        all_targets(),
    default_target: True
