# GRPO on the refinement dataset: one GPU, or a vLLM server and several training processes started inside
# the job (train.vllm_mode, train.training_processes: docs/multi-gpu.md), which set its GPU count. A rerun
# after a kill resumes from the last checkpoint kept in the checkpoints folder, which is deliberately not an
# output (Snakemake would delete it). SFT then RL (train.init_adapter: sft): only then is the sft rule's adapter an
# input, so switching it reruns only train and what depends on it.
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
        cfg=config_slice("train"),
        checkpoints=result("train/checkpoints"),
        gpu_memory=gpu_memory_path("train"),
        init_adapter=lambda wildcards, input: (
            f"--init-adapter {input.init_adapter}" if "init_adapter" in input.keys() else ""
        ),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} train --dataset {input.dataset} --model {input.model}"
        " --checkpoint-dir {params.checkpoints} --output {output.adapter} --metrics {output.metrics}"
        " --threads {threads} {params.init_adapter} --config-json {params.cfg}"
