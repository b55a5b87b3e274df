# Per BARC task, the best wrong prediction -> a second-turn prompt with execution feedback.
rule refine_dataset:
    input:
        tasks=expand(result("barc_split/part{part}.parquet"), part=PARTS),
        predictions=expand(result("inference/barc/part{part}.parquet"), part=PARTS),
        executions=expand(result("execute/barc/part{part}.parquet"), part=PARTS),
        model=rules.model.output,
    output:
        result("refine_dataset/refinement.parquet"),
    log:
        log_path("refine_dataset"),
    benchmark:
        benchmark_path("refine_dataset")
    params:
        cfg=config_slice("refine_dataset"),
        # training's prompt limit (its one owner): a prompt training would drop never enters the dataset
        max_prompt_tokens=WORKFLOW.train.max_prompt_tokens,
    shell:
        "arc-pipeline --log-file {log} refine-dataset --tasks {input.tasks} --predictions {input.predictions}"
        " --executions {input.executions} --model {input.model} --output {output}"
        " --max-prompt-tokens {params.max_prompt_tokens} --config-json {params.cfg}"
