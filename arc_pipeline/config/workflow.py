"""``WorkflowConfig``: the whole workflow config, one section per stage, each section the stage's own model.

This is the config's single source. ``rules/common.smk`` validates a run's config with it before any job
starts and hands each rule its section; the stage command parses that section with the same model
(``--config-json``). The JSON schema (``workflow/schemas/config.schema.yaml``) and the reference
(``docs/config-reference.md``) are generated from it (``arc-pipeline config-reference``), and a test
fails when either is stale.

Sections are named after the stage that reads them (``train`` for the ``train`` stage). Values two stages
need have one owner, and the workflow derives the other stage's value from it (``rules/common.smk``):
the training prompt limit is ``train``'s, the refinement runs' first half is ``evaluate``'s.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from arc_pipeline.stages.arc_tasks import ArcTasksConfig
from arc_pipeline.stages.barc_download import BarcDownloadConfig
from arc_pipeline.stages.barc_split import BarcSplitConfig
from arc_pipeline.stages.barc_tasks import BarcTasksConfig
from arc_pipeline.stages.canary import CanaryConfig
from arc_pipeline.stages.evaluate import EvaluateConfig
from arc_pipeline.stages.execute import ExecuteConfig
from arc_pipeline.stages.inference import InferenceConfig
from arc_pipeline.stages.model import ModelStageConfig
from arc_pipeline.stages.refine_dataset import RefineDatasetConfig
from arc_pipeline.stages.sft_dataset import SftDatasetConfig
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.sft.config import SftConfig


class BarcConfig(BaseModel):
    """The three BARC data stages: download, conversion into tasks, split into parts."""

    model_config = ConfigDict(extra="forbid")

    download: BarcDownloadConfig = Field(description="stage barc_download: where the BARC jsonl comes from")
    tasks: BarcTasksConfig = Field(description="stage barc_tasks: BARC rows into ARC tasks")
    split: BarcSplitConfig = Field(description="stage barc_split: the parts inference runs on")


class GpuJobConfig(BaseModel):
    """What a GPU job (inference, train) asks the cluster for, in HTCondor's submit names; the Slurm requests
    are derived from the same values (arc_pipeline/config/cluster.py)."""

    model_config = ConfigDict(extra="forbid")

    request_gpus: NonNegativeInt = Field(
        1,
        description="GPUs per job (HTCondor request_gpus, Slurm --gpus; also the `gpus` resource a workstation "
        "run limits with --resources gpus=N). The train job asks for train.training_processes (+ "
        "train.vllm_server_gpus in server mode) instead, unless this is 0 or train.use_cpu is true",
    )
    request_memory: str = Field(
        "64GB", description="host memory per job, HTCondor units (MiB if a bare number; Slurm --mem in MiB)"
    )
    request_disk: str = Field(
        "100GB", description="scratch disk per job, HTCondor units (KiB if a bare number; Snakemake's disk_mb)"
    )
    gpus_minimum_memory: int = Field(
        40000,
        description="MiB of GPU memory a matching GPU has at least (HTCondor; on Slurm choose slurm_gpu_model "
        "or slurm_partition accordingly)",
    )
    runtime: PositiveInt = Field(1440, description="wall-clock limit per job in minutes (Slurm -t)")
    slurm_partition: str | None = Field(None, description="Slurm partition of GPU jobs (null: the cluster's default)")
    slurm_gpu_model: str | None = Field(
        None, description="Slurm GPU type, e.g. h100 (--gpus=<model>:<n>; null: any GPU of the partition)"
    )
    threads: PositiveInt = Field(
        8,
        description="CPU threads per job (Snakemake's `threads`; the training "
        "reward sandbox uses this many workers, shared by train.training_processes, unless "
        "train.execution_workers is set)",
    )


class CpuJobConfig(BaseModel):
    """What a CPU job (execute) asks for."""

    model_config = ConfigDict(extra="forbid")

    threads: PositiveInt = Field(
        2,
        description="CPU threads per job (Snakemake's `threads`; the sandbox uses "
        "this many workers unless execute.workers is set)",
    )


class ClusterConfig(BaseModel):
    """Resources of the jobs (HTCondor requests through profiles/condor, Slurm requests through profiles/slurm;
    `threads` everywhere)."""

    model_config = ConfigDict(extra="forbid")

    gpu: GpuJobConfig = Field(default_factory=GpuJobConfig, description="GPU jobs")
    cpu: CpuJobConfig = Field(default_factory=CpuJobConfig, description="CPU jobs")
    compile_cache_dir: str | None = Field(
        None,
        description="folder of the vLLM / Inductor / Triton compile caches that every GPU job of the run shares "
        "(engine starts: 50-85 s cold, under 20 s warm); null = <results_dir>/compile-cache. On a cluster, a "
        "scratch folder every node reaches. Not a rerun trigger",
    )


class WorkflowConfig(BaseModel):
    """A whole run. Every stage section is required: a file of a few overrides names its preset (`base:`)."""

    model_config = ConfigDict(extra="forbid")

    results_dir: str = Field("results", description="folder under which every stage writes <stage>/...")
    barc: BarcConfig = Field(description="the BARC data stages")
    arc_tasks: ArcTasksConfig = Field(description="stage arc_tasks: the ARC-AGI evaluation tasks")
    model: ModelStageConfig = Field(description="stage model: the base model folder")
    inference: InferenceConfig = Field(
        description="stage inference: sampling and the vLLM engine (BARC parts; the evaluation's runs use it too)"
    )
    execute: ExecuteConfig = Field(
        description="stage execute: the sandbox and scoring of BARC predictions "
        "(the evaluation's execute jobs use it with evaluate.execute over it)"
    )
    refine_dataset: RefineDatasetConfig = Field(description="stage refine_dataset: the second-turn training set")
    train: TrainConfig = Field(description="stage train: GRPO of the refinement LoRA")
    sft_dataset: SftDatasetConfig = Field(
        default_factory=SftDatasetConfig,
        description="stage sft_dataset: the SFT refiner's training set, the base model's own solving refinements "
        "(its rules run with sft.enabled, or when asked for)",
    )
    sft: SftConfig = Field(
        default_factory=SftConfig, description="stage sft: supervised fine-tuning of a refinement LoRA (off by default)"
    )
    evaluate: EvaluateConfig = Field(description="stage evaluate: the ARC-AGI evaluation runs and their tables")
    canary: CanaryConfig = Field(
        default_factory=CanaryConfig, description="stage canary: the learning canary's verdict (config/canary.yaml)"
    )
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="job resources")

    def own_refiners(self) -> list[str]:
        """The workflow's own refiners, in the evaluation's order: base, rl, then sft and sft_rl where enabled."""
        return [
            "base",
            "rl",
            *(["sft"] if self.sft.enabled else []),
            *(["sft_rl"] if self.sft.compare_sft_then_rl else []),
        ]

    def evaluated_refiners(self) -> list[str]:
        """Every refiner of the evaluation (rules/evaluate.smk): the workflow's own, then the extra adapters."""
        return [*self.own_refiners(), *self.evaluate.extra_adapters]

    def searching_refiners(self) -> list[str]:
        """The refiners that run the search (``evaluate.search.refiners``, empty = all), in the evaluation's order;
        none when the search is off."""
        if not self.evaluate.search.enabled:
            return []
        chosen = self.evaluate.search.refiners
        return [name for name in self.evaluated_refiners() if not chosen or name in chosen]

    @model_validator(mode="after")
    def _check_search(self) -> WorkflowConfig:
        """Each search schedule fits the baseline (its total at most evaluate.n_eval, so that independent sampling
        is compared at the same budget) and its rounds are whole prompts of inference.n samples."""
        search = self.evaluate.search
        if not search.enabled:
            return self
        unknown = sorted(set(search.refiners) - set(self.evaluated_refiners()))
        if unknown:
            raise ValueError(
                f"evaluate.search.refiners: {unknown} are not evaluated refiners {self.evaluated_refiners()}"
            )
        n = self.inference.n
        for schedule in search.schedules:
            if sum(schedule) > self.evaluate.n_eval:
                raise ValueError(
                    f"evaluate.search.schedules: {schedule} spends {sum(schedule)} predictions per task, more than "
                    f"evaluate.n_eval {self.evaluate.n_eval}, the independent predictions it is compared with"
                )
            uneven = [size for size in schedule[1:] if size % n]
            if uneven:
                raise ValueError(
                    f"evaluate.search.schedules: rounds {uneven} of {schedule} are not multiples of inference.n {n} "
                    "(a round is prompts x n samples)"
                )
        return self

    @model_validator(mode="after")
    def _check_refiners(self) -> WorkflowConfig:
        """The evaluation's refiner names (rules/evaluate.smk: base, rl, sft, sft_rl, extra adapters) are unique,
        and SFT then RL beside RL alone (sft.compare_sft_then_rl) has what it needs."""
        taken = set(self.own_refiners())
        clash = sorted(taken & set(self.evaluate.extra_adapters))
        if clash:
            raise ValueError(f"evaluate.extra_adapters: {clash} name the workflow's own refiners; rename them")
        if self.sft.compare_sft_then_rl:
            if not self.sft.enabled:
                raise ValueError("sft.compare_sft_then_rl needs sft.enabled true (the SFT adapter it continues)")
            if self.train.init_adapter != "none":
                raise ValueError(
                    "sft.compare_sft_then_rl compares GRPO from the SFT adapter with GRPO from a fresh LoRA: set "
                    "train.init_adapter none (with sft, the rl refiner is already SFT then RL)"
                )
            if self.train.backend != "trl":
                raise ValueError("sft.compare_sft_then_rl needs train.backend trl (init_adapter's backend)")
        return self


# Sections and fields renamed or removed, with what replaces them: old override files still work (renamed
# keys are read under their new name with a warning) or fail saying what to write instead.
RENAMED_SECTIONS = {
    "arc": "arc_tasks",
    "execution": "execute",
    "refinement": "refine_dataset",
    "training": "train",
    "evaluation": "evaluate",
}
RENAMED_FIELDS = {("evaluate", "execution"): "execute"}
REMOVED_FIELDS = {
    ("refine_dataset", "max_prompt_tokens"): "the training set's prompt limit is train.max_seq_length - "
    "train.max_completion_length (one owner); set those instead",
}
