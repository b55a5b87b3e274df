# Per BARC task, the best wrong prediction -> a second-turn prompt with execution feedback.
rule refine_dataset:
    input:
        tasks=expand(result("barc_split/part{part}.parquet"), part=PARTS),
        predictions=expand(result("inference/barc/part{part}.parquet"), part=PARTS),
        executions=expand(result("execute/barc/part{part}.parquet"), part=PARTS),
        model=rules.model.output,
    output:
        result("refine_dataset/refinement.parquet"),
    params:
        cfg=config_slice("refinement"),
    log:
        log_path("refine_dataset"),
    shell:
        "arc-pipeline --log-file {log} refine-dataset --tasks {input.tasks} --predictions {input.predictions}"
        " --executions {input.executions} --model {input.model} --output {output} --config-json {params.cfg}"
