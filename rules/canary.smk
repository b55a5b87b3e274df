# The learning canary's verdict (config/canary.yaml, docs/canary.md): training reward curve and held-out
# is_correct of the RL-refiner against base refines, and with evaluate.search its search against base refines'.
# Only in runs that enable it: its figure is marked for the report.
if WORKFLOW.canary.enabled:

    rule canary:
        input:
            training_metrics=rules.train.output.metrics,
            tasks=rules.evaluate.output.tasks_parquet,
            search=rules.search.output.tasks if WORKFLOW.evaluate.search.enabled else [],
        output:
            verdict=result("canary/verdict.json"),
            verdict_md=result("canary/verdict.md"),
            figure=report(
                result("canary/canary.png"), category="Learning canary", caption="../workflow/report/canary.rst"
            ),
        log:
            log_path("canary"),
        benchmark:
            benchmark_path("canary")
        params:
            cfg=config_slice("canary"),
            reward_metric=f"rewards/{WORKFLOW.train.reward}/mean",
            search=lambda wildcards, input: f"--search {input.search}" if input.search else "",
            outdir=result("canary"),
        shell:
            "arc-pipeline --log-file {log} canary --training-metrics {input.training_metrics} --tasks {input.tasks}"
            " --reward-metric {params.reward_metric} {params.search} --output-dir {params.outdir}"
            " --config-json {params.cfg}"
