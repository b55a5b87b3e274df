# Test-time search in rounds (evaluate.search; docs/scoring.md, "Search in rounds"): per refiner, each round refines
# the best wrong programs that refiner has found so far, with their feedback, until the schedule's budget is spent.
# A round's files live under the schedule prefix it ends (evaluate/search/<refiner>/32+32+32/: round 2 after 32
# independent predictions), so schedules that start alike share rounds, and adding a round plans that round alone.
from arc_pipeline.stages.evaluate_config import schedule_name

SEARCH = WORKFLOW.evaluate.search
SEARCH_REFINERS = WORKFLOW.searching_refiners()


wildcard_constraints:
    prefix=r"\d+(\+\d+)+",


def prefix_sizes(prefix):
    """[B0, B1, .., Br] of a schedule prefix such as 32+32+32."""
    return [int(size) for size in prefix.split("+")]


def search_prefixes():
    """Every round of every schedule, as the prefix it ends, once each."""
    return list(
        dict.fromkeys(
            schedule_name(schedule[: r + 1]) for schedule in SEARCH.schedules for r in range(1, len(schedule))
        )
    )


def is_one_round_run(prefix):
    """Round 1 of a schedule that is the one-round table's own run (its first half, refinement_prompts x n
    refinements, unmutated): that run's files are the round, computed once."""
    sizes = prefix_sizes(prefix)
    return (
        len(sizes) == 2
        and not SEARCH.mutated
        and sizes[0] == WORKFLOW.evaluate.first_predictions
        and sizes[1] == WORKFLOW.evaluate.refinement_prompts * refinement_inference()["n"]
    )


def round_folder(refiner, prefix):
    if is_one_round_run(prefix):
        return result(f"evaluate/refine_{refiner}")
    return result(f"evaluate/search/{refiner}/{prefix}")


def earlier_rounds(kind):
    """The `kind` files (predictions, executions) of the rounds before the wildcards' round, in round order."""

    def files(wildcards):
        sizes = prefix_sizes(wildcards.prefix)
        prefixes = [schedule_name(sizes[: j + 1]) for j in range(1, len(sizes) - 1)]
        return [f"{round_folder(wildcards.refiner, prefix)}/{kind}.parquet" for prefix in prefixes]

    return files


def search_prompts_slice(wildcards):
    """Exactly what search-prompts reads for this round: its number and prompts per task, the selection, and the
    refinement inference's context. Earlier rounds' sizes reach it as files, so a later round's change reruns
    nothing here."""
    sizes = prefix_sizes(wildcards.prefix)
    value = {
        "round": len(sizes) - 1,
        "refinement_prompts": sizes[-1] // refinement_inference()["n"],
        "parents": SEARCH.parents,
        "feedback": SEARCH.feedback,
        "seed": SEARCH.seed,
        **refinement_context(),
    }
    return shlex.quote(json.dumps(value, sort_keys=True))


def search_inference_slice(wildcards):
    """The refinement inference's settings; round r's predictions are turn r + 1 (their ids and seeds differ)."""
    value = dict(refinement_inference(), turn=len(prefix_sizes(wildcards.prefix)))
    return shlex.quote(json.dumps(value, sort_keys=True))


def search_round_options():
    """--rounds REFINER:PREFIX:EXECUTIONS of every round of every searching refiner."""
    return " ".join(
        shlex.quote(f"{refiner}:{prefix}:{round_folder(refiner, prefix)}/executions.parquet")
        for refiner in SEARCH_REFINERS
        for prefix in search_prefixes()
    )


rule search_prompts:
    input:
        tasks=rules.arc_tasks.output,
        predictions=rules.evaluate_baseline_gather.output,
        executions=result("evaluate/baseline/executions.parquet"),
        model=rules.model.output,
        earlier_predictions=earlier_rounds("predictions"),
        earlier_executions=earlier_rounds("executions"),
    output:
        prompts=result("evaluate/search/{refiner}/{prefix}/prompts.parquet"),
        dropped=result("evaluate/search/{refiner}/{prefix}/prompts.dropped.parquet"),
    log:
        log_path("evaluate/search/{refiner}/{prefix}/prompts"),
    benchmark:
        benchmark_path("search_prompts", "{refiner}/{prefix}")
    params:
        cfg=search_prompts_slice,
        initial=lambda wildcards: prefix_sizes(wildcards.prefix)[0],
    shell:
        "arc-pipeline --log-file {log} search-prompts --tasks {input.tasks} --predictions {input.predictions}"
        " --executions {input.executions} --initial {params.initial}"
        " --earlier-predictions {input.earlier_predictions} --earlier-executions {input.earlier_executions}"
        " --model {input.model} --output {output.prompts} --dropped {output.dropped} --config-json {params.cfg}"


rule search_inference:
    input:
        refinements=rules.search_prompts.output.prompts,
        model=refiner_model,
        adapter=refiner_lora,
    output:
        result("evaluate/search/{refiner}/{prefix}/predictions.parquet"),
    log:
        log_path("evaluate/search/{refiner}/{prefix}/inference"),
    benchmark:
        benchmark_path("search_inference", "{refiner}/{prefix}")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=search_inference_slice,
        adapter=lora_option,
        gpu_memory=gpu_memory_path("search_inference", "{refiner}/{prefix}"),
    shell:
        REFINEMENT_INFERENCE_SHELL


rule search_execute:
    input:
        predictions=rules.search_inference.output,
        tasks=rules.arc_tasks.output,
    output:
        executions=result("evaluate/search/{refiner}/{prefix}/executions.parquet"),
        metrics=result("evaluate/search/{refiner}/{prefix}/metrics.parquet"),
        metrics_md=result("evaluate/search/{refiner}/{prefix}/metrics.md"),
        errors=result("evaluate/search/{refiner}/{prefix}/errors.parquet"),
        errors_md=result("evaluate/search/{refiner}/{prefix}/errors.md"),
    log:
        log_path("evaluate/search/{refiner}/{prefix}/execute"),
    benchmark:
        benchmark_path("search_execute", "{refiner}/{prefix}")
    threads: WORKFLOW.cluster.cpu.threads
    params:
        cfg=shlex.quote(json.dumps(evaluation_execution(), sort_keys=True)),
    shell:
        EVALUATION_EXECUTE_SHELL


rule search:
    input:
        tasks=rules.arc_tasks.output,
        baseline_predictions=rules.evaluate_baseline_gather.output,
        baseline=result("evaluate/baseline/executions.parquet"),
        rounds=[
            f"{round_folder(refiner, prefix)}/executions.parquet"
            for refiner in SEARCH_REFINERS
            for prefix in search_prefixes()
        ],
    output:
        table=result("evaluate/report/search.md"),
        html=evaluation_report("search.html", "search.rst", "Tables"),
        summary=result("evaluate/report/search.parquet"),
        tasks=result("evaluate/report/search_tasks.parquet"),
        figure=evaluation_report("search.png", "search_plot.rst", "Figures"),
    log:
        log_path("evaluate/report.search"),
    benchmark:
        benchmark_path("search")
    params:
        cfg=config_slice("evaluate", "search"),
        rounds=search_round_options(),
        outdir=result("evaluate/report"),
    shell:
        "arc-pipeline --log-file {log} search --tasks {input.tasks} --baseline-predictions {input.baseline_predictions}"
        " --baseline {input.baseline} --rounds {params.rounds} --output-dir {params.outdir} --config-json {params.cfg}"
