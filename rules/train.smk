# GRPO on the refinement dataset: one GPU, or a vLLM server and several training processes started inside
# the job (train.vllm_mode, train.training_processes: docs/multi-gpu.md), which set its GPU count. A rerun
# after a kill resumes from the last checkpoint kept in the checkpoints folder, which is deliberately not an
# output (Snakemake would delete it). SFT then RL (train.init_adapter: sft): only then is the sft rule's adapter an
# input, so switching it reruns only train and what depends on it.


def train_params(folder, init_adapter=WORKFLOW.train.init_adapter):
    """The params of a GRPO job writing <results_dir>/<folder>: rule train, and train_sft_rl (SFT then RL beside
    RL alone, sft.compare_sft_then_rl), whose config is train's with init_adapter sft."""
    return {
        "cfg": shlex.quote(json.dumps(dict(config["train"], init_adapter=init_adapter), sort_keys=True)),
        "checkpoints": result(f"{folder}/checkpoints"),
        "gpu_memory": gpu_memory_path(folder),
        "init_adapter": lambda wildcards, input: (
            f"--init-adapter {input.init_adapter}" if "init_adapter" in input.keys() else ""
        ),
    }


rule train:
    input:
        **({"init_adapter": rules.sft.output.adapter} if WORKFLOW.train.init_adapter == "sft" else {}),
        dataset=rules.refine_dataset.output,
        model=rules.model.output,
    output:
        adapter=directory(result("train/adapter")),
        metrics=result("train/metrics.parquet"),
    log:
        log_path("train"),
    benchmark:
        benchmark_path("train")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **train_gpu_resources(),
    params:
        **train_params("train"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} train --dataset {input.dataset} --model {input.model}"
        " --checkpoint-dir {params.checkpoints} --output {output.adapter} --metrics {output.metrics}"
        " --threads {threads} {params.init_adapter} --config-json {params.cfg}"


# SFT then RL beside RL alone (sft.compare_sft_then_rl): the same GRPO job, from the sft rule's adapter, into
# <results_dir>/train_sft_rl; the evaluation's refiner sft_rl.
if WORKFLOW.sft.compare_sft_then_rl:

    use rule train as train_sft_rl with:
        input:
            init_adapter=rules.sft.output.adapter,
            dataset=rules.refine_dataset.output,
            model=rules.model.output,
        output:
            adapter=directory(result("train_sft_rl/adapter")),
            metrics=result("train_sft_rl/metrics.parquet"),
        log:
            log_path("train_sft_rl"),
        benchmark:
            benchmark_path("train_sft_rl")
        params:
            **train_params("train_sft_rl", init_adapter="sft"),
