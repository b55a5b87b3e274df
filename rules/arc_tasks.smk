rule arc_tasks:
    output:
        result("arc_tasks/tasks.parquet"),
    params:
        cfg=config_slice("arc_tasks"),
    log:
        log_path("arc_tasks"),
    shell:
        "arc-pipeline --log-file {log} arc-tasks --output {output} --config-json {params.cfg}"
