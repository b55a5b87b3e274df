# The base model folder: a tiny Llama built here (embedded default), the hub model, or a local path.
rule model:
    input:
        # the tiny model's tokenizer is trained on the bundled prompts' text
        rules.barc_tasks.output.tasks,
    output:
        directory(result("model/base")),
    log:
        log_path("model"),
    benchmark:
        benchmark_path("model")
    params:
        cfg=config_slice("model"),
    shell:
        "arc-pipeline --log-file {log} model --tasks {input} --output {output} --config-json {params.cfg}"


# Fetching (hub) or linking (path) a model needs the internet or only the submit machine's disk:
# run it there. Building the tiny or random model is compute, so it stays a job.
if WORKFLOW.model.source in ("hub", "path"):

    localrules:
        model,
