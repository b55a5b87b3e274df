# The SFT refiner (issue 33): the base model samples sft_dataset.samples_per_prompt answers to every refinement
# prompt of the training set (the inference stage's --refinements mode, as the evaluation's refinement runs), they
# run in the sandbox, the ones that solved their task become the SFT data, and the sft stage trains a LoRA on
# them. In the DAG only with sft.enabled, or when <results_dir>/sft/adapter is asked for. The sampling is sharded
# like BARC inference (sft_dataset.shards GPU jobs, then gathered), so a killed run redoes only unfinished shards.
SFT_SHARDS = list(range(WORKFLOW.sft_dataset.shards))


def sft_inference_slice():
    """`inference` with n = samples_per_prompt: each refinement prompt is sampled that many times."""
    k = WORKFLOW.sft_dataset.samples_per_prompt
    return shlex.quote(json.dumps(dict(config["inference"], n=k, n_predictions=k), sort_keys=True))


def sft_stage_slice():
    """The `sft` section without its switches (enabled, compare_sft_then_rl): switching targets on must not rerun a
    trained adapter."""
    value = {key: item for key, item in config["sft"].items() if key not in ("enabled", "compare_sft_then_rl")}
    return shlex.quote(json.dumps(value, sort_keys=True))


rule sft_shard_prompts:
    input:
        rules.refine_dataset.output,
    output:
        temp(result("sft_dataset/shard{shard}.prompts.parquet")),
    log:
        log_path("sft_dataset/shard{shard}.prompts"),
    benchmark:
        benchmark_path("sft_shard_prompts", "shard{shard}")
    params:
        n_shards=len(SFT_SHARDS),
    shell:
        "arc-pipeline --log-file {log} shard --schema refinements --input {input} --index {wildcards.shard}"
        " --count {params.n_shards} --output {output}"


rule sft_inference:
    input:
        refinements=rules.sft_shard_prompts.output,
        model=rules.model.output,
    output:
        result("sft_dataset/shard{shard}.predictions.parquet"),
    log:
        log_path("sft_dataset/inference.shard{shard}"),
    benchmark:
        benchmark_path("sft_inference", "shard{shard}")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=sft_inference_slice(),
        gpu_memory=gpu_memory_path("sft_inference", "shard{shard}"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} inference --refinements {input.refinements}"
        " --model {input.model} --output {output} --config-json {params.cfg}"


rule sft_gather:
    input:
        expand(result("sft_dataset/shard{shard}.predictions.parquet"), shard=SFT_SHARDS),
    output:
        result("sft_dataset/predictions.parquet"),
    log:
        log_path("sft_dataset/inference.gather"),
    benchmark:
        benchmark_path("sft_gather")
    shell:
        "arc-pipeline --log-file {log} gather --schema predictions --inputs {input} --output {output}"


rule sft_execute:
    input:
        predictions=rules.sft_gather.output,
        tasks=expand(result("barc_split/part{part}.parquet"), part=PARTS),
    output:
        executions=result("sft_dataset/executions.parquet"),
        metrics=result("sft_dataset/metrics.parquet"),
        metrics_md=result("sft_dataset/metrics.md"),
        errors=result("sft_dataset/errors.parquet"),
        errors_md=result("sft_dataset/errors.md"),
    log:
        log_path("sft_dataset/execute"),
    benchmark:
        benchmark_path("sft_execute")
    threads: WORKFLOW.cluster.cpu.threads
    params:
        cfg=config_slice("execute"),
    shell:
        "arc-pipeline --log-file {log} execute --predictions {input.predictions} --tasks {input.tasks}"
        " --executions {output.executions} --metrics {output.metrics} --metrics-md {output.metrics_md}"
        " --errors {output.errors} --errors-md {output.errors_md} --threads {threads} --config-json {params.cfg}"


rule sft_dataset:
    input:
        refinements=rules.refine_dataset.output,
        predictions=rules.sft_gather.output,
        executions=rules.sft_execute.output.executions,
    output:
        dataset=result("sft_dataset/sft.parquet"),
        summary=result("sft_dataset/summary.json"),
    log:
        log_path("sft_dataset"),
    benchmark:
        benchmark_path("sft_dataset")
    params:
        cfg=config_slice("sft_dataset"),
    shell:
        "arc-pipeline --log-file {log} sft-dataset --refinements {input.refinements} --predictions {input.predictions}"
        " --executions {input.executions} --output {output.dataset} --summary {output.summary}"
        " --config-json {params.cfg}"


# As rule train: the checkpoints folder is deliberately not an output (Snakemake would delete it on failure).
rule sft:
    input:
        dataset=rules.sft_dataset.output.dataset,
        model=rules.model.output,
    output:
        adapter=directory(result("sft/adapter")),
        metrics=result("sft/metrics.parquet"),
    log:
        log_path("sft"),
    benchmark:
        benchmark_path("sft")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=sft_stage_slice(),
        checkpoints=result("sft/checkpoints"),
        gpu_memory=gpu_memory_path("sft"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} sft --dataset {input.dataset} --model {input.model}"
        " --checkpoint-dir {params.checkpoints} --output {output.adapter} --metrics {output.metrics}"
        " --config-json {params.cfg}"
