# Time and memory of every job (the `benchmark:` file of each rule, plus the GPU peak of GPU jobs) as one
# table for the report. Benchmark files exist only once their jobs have run, so this job waits for the
# workflow's final outputs (everything else is upstream of them) and reads the folder then.
rule benchmark_summary:
    input:
        final_outputs(),
    output:
        md=result("benchmarks/summary.md"),
        html=report(
            result("benchmarks/summary.html"),
            category="Time and memory",
            caption="../workflow/report/benchmarks.rst",
        ),
    log:
        log_path("benchmark_summary"),
    benchmark:
        benchmark_path("benchmark_summary")
    params:
        folder=result("benchmarks"),
        own=benchmark_path("benchmark_summary"),
    shell:
        "arc-pipeline --log-file {log} benchmark-summary --benchmarks {params.folder} --exclude {params.own}"
        " --output-md {output.md} --output-html {output.html}"
