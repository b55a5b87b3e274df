# One job per part: deleting one part's parquet regenerates only that part.
rule barc_split:
    input:
        rules.barc_tasks.output.tasks,
    output:
        result("barc_split/part{part}.parquet"),
    log:
        log_path("barc_split/part{part}"),
    benchmark:
        benchmark_path("barc_split", "part{part}")
    params:
        cfg=config_slice("barc", "split"),
    shell:
        "arc-pipeline --log-file {log} barc-split --tasks {input} --part {wildcards.part}"
        " --output {output} --config-json {params.cfg}"
