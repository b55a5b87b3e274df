rule arc_tasks:
    output:
        result("arc_tasks/tasks.parquet"),
    log:
        log_path("arc_tasks"),
    benchmark:
        benchmark_path("arc_tasks")
    params:
        cfg=config_slice("arc_tasks"),
    shell:
        "arc-pipeline --log-file {log} arc-tasks --output {output} --config-json {params.cfg}"
