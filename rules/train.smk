# GRPO on the refinement dataset (one GPU). A rerun after a kill resumes from the last checkpoint
# kept in the checkpoints folder, which is deliberately not an output (Snakemake would delete it).
rule train:
    input:
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
        **gpu_resources(),
    params:
        cfg=config_slice("train"),
        checkpoints=result("train/checkpoints"),
        gpu_memory=gpu_memory_path("train"),
    shell:
        "arc-pipeline --log-file {log} --gpu-memory-file {params.gpu_memory} train --dataset {input.dataset} --model {input.model}"
        " --checkpoint-dir {params.checkpoints} --output {output.adapter} --metrics {output.metrics}"
        " --threads {threads} --config-json {params.cfg}"
