# BARC parts -> K shards -> one GPU job each -> gathered predictions per part.


rule inference_shard_tasks:
    input:
        result("barc_split/part{part}.parquet"),
    output:
        temp(result("inference/barc/part{part}/shard{shard}.tasks.parquet")),
    log:
        log_path("inference/barc/part{part}/shard{shard}.tasks"),
    benchmark:
        benchmark_path("inference_shard_tasks", "part{part}/shard{shard}")
    params:
        n_shards=WORKFLOW.inference.shards,
    shell:
        "arc-pipeline --log-file {log} shard --tasks {input} --index {wildcards.shard}"
        " --count {params.n_shards} --output {output}"


rule inference:
    input:
        tasks=rules.inference_shard_tasks.output,
        model=rules.model.output,
    output:
        result("inference/barc/part{part}/shard{shard}.parquet"),
    log:
        log_path("inference/barc/part{part}/shard{shard}"),
    benchmark:
        benchmark_path("inference", "part{part}/shard{shard}")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=config_slice("inference"),
        gpu_memory=gpu_memory_path("inference", "part{part}/shard{shard}"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} inference --tasks {input.tasks} --model {input.model}"
        " --output {output} --config-json {params.cfg}"


rule inference_gather:
    input:
        expand(result("inference/barc/part{{part}}/shard{shard}.parquet"), shard=SHARDS),
    output:
        result("inference/barc/part{part}.parquet"),
    log:
        log_path("inference/barc/part{part}.gather"),
    benchmark:
        benchmark_path("inference_gather", "part{part}")
    shell:
        "arc-pipeline --log-file {log} gather --schema predictions --inputs {input} --output {output}"
