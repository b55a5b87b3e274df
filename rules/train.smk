# GRPO on the refinement dataset: one GPU, or a vLLM server and several training processes started inside
# the job (train.vllm_mode, train.training_processes: docs/multi-gpu.md), which set its GPU count. A rerun
# after a kill resumes from the last checkpoint kept in the checkpoints folder, which is deliberately not an
# output (Snakemake would delete it).
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
        **train_gpu_resources(),
    params:
        cfg=config_slice("train"),
        checkpoints=result("train/checkpoints"),
        gpu_memory=gpu_memory_path("train"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} train --dataset {input.dataset} --model {input.model}"
        " --checkpoint-dir {params.checkpoints} --output {output.adapter} --metrics {output.metrics}"
        " --threads {threads} --config-json {params.cfg}"
