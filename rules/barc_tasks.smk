rule barc_tasks:
    input:
        rules.barc_download.output,
    output:
        tasks=result("barc_tasks/tasks.parquet"),
        summary=result("barc_tasks/tasks.summary.json"),
    log:
        log_path("barc_tasks"),
    benchmark:
        benchmark_path("barc_tasks")
    params:
        cfg=config_slice("barc", "tasks"),
    shell:
        "arc-pipeline --log-file {log} barc-tasks --input {input} --output {output.tasks}" " --config-json {params.cfg}"
