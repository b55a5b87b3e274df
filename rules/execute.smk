# Run every predicted program in the sandbox (CPU job), score it, write the metric and error tables.
rule execute:
    input:
        predictions=rules.inference_gather.output,
        tasks=result("barc_split/part{part}.parquet"),
    output:
        executions=result("execute/barc/part{part}.parquet"),
        metrics=result("execute/barc/part{part}.metrics.parquet"),
        metrics_md=result("execute/barc/part{part}.metrics.md"),
        # the report shows HTML inline (markdown only as a download)
        metrics_html=report(
            result("execute/barc/part{part}.metrics.html"),
            category="BARC inference",
            caption="../workflow/report/barc_metrics.rst",
        ),
        errors=result("execute/barc/part{part}.errors.parquet"),
        errors_md=result("execute/barc/part{part}.errors.md"),
    log:
        log_path("execute/barc/part{part}"),
    benchmark:
        benchmark_path("execute", "part{part}")
    threads: WORKFLOW.cluster.cpu.threads
    params:
        cfg=config_slice("execute"),
    shell:
        "arc-pipeline --log-file {log} execute --predictions {input.predictions} --tasks {input.tasks}"
        " --executions {output.executions} --metrics {output.metrics} --metrics-md {output.metrics_md}"
        " --metrics-html {output.metrics_html} --title 'BARC part {wildcards.part}: first-turn predictions'"
        " --errors {output.errors} --errors-md {output.errors_md} --threads {threads} --config-json {params.cfg}"
