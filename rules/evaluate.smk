# ARC evaluation: n_eval independent predictions (baseline) vs the first half of them plus
# refinements of their wrong answers by the base model, the trained adapter and any extra adapters.
import json

from arc_pipeline.config import evaluation_settings

# refiner name -> its adapter folder (base refines with none): rl is rule train's, sft rule sft's (its runs with
# sft.enabled), sft_rl rule train_sft_rl's (sft.compare_sft_then_rl); then the extra adapters
REFINER_ADAPTERS = {
    "rl": rules.train.output.adapter,
    "sft": rules.sft.output.adapter,
    **({"sft_rl": rules.train_sft_rl.output.adapter} if WORKFLOW.sft.compare_sft_then_rl else {}),
    **WORKFLOW.evaluate.extra_adapters,
}
REFINERS = WORKFLOW.evaluated_refiners()
EVAL_SHARDS = list(range(WORKFLOW.evaluate.shards))


def evaluation_engine():
    """`inference` with the evaluation's own vLLM settings (`evaluate.engine`, those set) over it."""
    return evaluation_settings.evaluation_engine(WORKFLOW)


def eval_inference_slice(n_predictions):
    merged = dict(evaluation_engine(), n_predictions=n_predictions)
    return shlex.quote(json.dumps(merged, sort_keys=True))


def refinement_inference():
    """The inference settings of the refinement runs: `evaluation_engine()` with the evaluation's own context."""
    return evaluation_settings.refinement_inference(WORKFLOW)


def refinement_context():
    """The refinement inference's context, from which refine-prompts and search-prompts derive the prompt length
    limit (so they drop exactly what that inference could not sample)."""
    inference = refinement_inference()
    return {key: inference[key] for key in ("max_model_len", "max_tokens", "double_bos")}


def refine_prompts_slice():
    """Exactly what refine-prompts reads: prompts per task and the refinement inference's context."""
    value = {"refinement_prompts": WORKFLOW.evaluate.refinement_prompts, **refinement_context()}
    return shlex.quote(json.dumps(value, sort_keys=True))


# The refinement inference and the execution of an evaluation run, shared by rules/search.smk's rounds.
REFINEMENT_INFERENCE_SHELL = (
    GPU_STAGE + " --log-file {log} --gpu-memory-file {params.gpu_memory} inference --refinements {input.refinements}"
    " --model {input.model} {params.adapter} --output {output} --config-json {params.cfg}"
)
EVALUATION_EXECUTE_SHELL = (
    "arc-pipeline --log-file {log} execute --predictions {input.predictions} --tasks {input.tasks}"
    " --executions {output.executions} --metrics {output.metrics} --metrics-md {output.metrics_md}"
    " --errors {output.errors} --errors-md {output.errors_md} --threads {threads} --config-json {params.cfg}"
)


def lora_option(wildcards, input):
    """inference's --adapter for a refiner served as base + LoRA (none when merged, or for base)."""
    return f"--adapter {input.adapter}" if input.adapter else ""


def evaluate_slice():
    """The evaluate section as the evaluate stage reads it: without `search`, which only rules/search.smk's rules
    read, so that a changed search reruns the search and not the one-round tables."""
    value = {key: value for key, value in config["evaluate"].items() if key != "search"}
    return shlex.quote(json.dumps(value, sort_keys=True))


def evaluation_execution():
    """`execute` with the evaluation's own settings (`evaluate.execute`) merged over it."""
    own = {key: value for key, value in config["evaluate"]["execute"].items() if value is not None}
    return dict(config["execute"], **own)


def evaluation_report(name, caption, subcategory):
    return report(
        result(f"evaluate/report/{name}"),
        category="Evaluation",
        subcategory=subcategory,
        caption=f"../workflow/report/{caption}",
    )


def published_outputs():
    """The table beside the published results, for the published preset only."""
    if not WORKFLOW.evaluate.compare_with_published:
        return {}
    return {
        "published": evaluation_report("published.html", "published.rst", "Tables"),
        "published_md": result("evaluate/report/published.md"),
    }


def refiner_adapter(wildcards):
    if wildcards.refiner == "base":
        return []
    return REFINER_ADAPTERS[wildcards.refiner]


def adapters_option():
    """--adapters NAME=FOLDER of every evaluated refiner with an adapter: runs.md's adapter column."""
    pairs = [f"{name}={REFINER_ADAPTERS[name]}" for name in REFINERS if name in REFINER_ADAPTERS]
    return " ".join(shlex.quote(pair) for pair in pairs)


def runs_merged(refiner):
    """Whether this refiner runs as its adapter merged into the base weights (evaluate.merge_adapter)."""
    return WORKFLOW.evaluate.merge_adapter and refiner != "base"


def refiner_model(wildcards):
    """The model folder a refiner's inference loads: the base model, or its adapter's merged model."""
    if runs_merged(wildcards.refiner):
        return result(f"evaluate/merged_{wildcards.refiner}")
    return rules.model.output


def refiner_lora(wildcards):
    """The adapter vLLM applies on top of the model: none when the adapter is merged into it."""
    return [] if runs_merged(wildcards.refiner) else refiner_adapter(wildcards)


# An adapter merged into the base weights once (evaluate.merge_adapter), so its refinement runs at the base
# model's speed; the merge runs on the GPU node, where it computes each weight's update (arc_pipeline/models/merge.py).
rule merge_adapter:
    input:
        model=rules.model.output,
        adapter=refiner_adapter,
    output:
        directory(result("evaluate/merged_{refiner}")),
    log:
        log_path("evaluate/merged_{refiner}"),
    benchmark:
        benchmark_path("merge_adapter", "{refiner}")
    wildcard_constraints:
        refiner=r"(?!base$)[A-Za-z0-9_-]+",
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=config_slice("evaluate", "merge"),
        gpu_memory=gpu_memory_path("merge_adapter", "{refiner}"),
    shell:
        GPU_STAGE + " --log-file {log} --gpu-memory-file {params.gpu_memory} merge-adapter --model {input.model}"
        " --adapter {input.adapter} --output {output} --config-json {params.cfg}"


# The baseline (n_eval predictions of every evaluation task) is sharded like BARC inference: one GPU
# job per shard, so a killed run redoes only the shards that had not finished.
rule evaluate_baseline_shard_tasks:
    input:
        rules.arc_tasks.output,
    output:
        temp(result("evaluate/baseline/shard{shard}.tasks.parquet")),
    log:
        log_path("evaluate/baseline/shard{shard}.tasks"),
    benchmark:
        benchmark_path("evaluate_baseline_shard_tasks", "shard{shard}")
    params:
        n_shards=len(EVAL_SHARDS),
    shell:
        "arc-pipeline --log-file {log} shard --tasks {input} --index {wildcards.shard}"
        " --count {params.n_shards} --output {output}"


rule evaluate_baseline_inference:
    input:
        tasks=rules.evaluate_baseline_shard_tasks.output,
        model=rules.model.output,
    output:
        result("evaluate/baseline/shard{shard}.parquet"),
    log:
        log_path("evaluate/baseline/inference.shard{shard}"),
    benchmark:
        benchmark_path("evaluate_baseline_inference", "shard{shard}")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=eval_inference_slice(WORKFLOW.evaluate.n_eval),
        gpu_memory=gpu_memory_path("evaluate_baseline_inference", "shard{shard}"),
    shell:
        GPU_STAGE
        + " --log-file {log} --gpu-memory-file {params.gpu_memory} inference --tasks {input.tasks} --model {input.model}"
        " --output {output} --config-json {params.cfg}"


rule evaluate_baseline_gather:
    input:
        expand(result("evaluate/baseline/shard{shard}.parquet"), shard=EVAL_SHARDS),
    output:
        result("evaluate/baseline/predictions.parquet"),
    log:
        log_path("evaluate/baseline/inference.gather"),
    benchmark:
        benchmark_path("evaluate_baseline_gather")
    shell:
        "arc-pipeline --log-file {log} gather --schema predictions --inputs {input} --output {output}"


rule evaluate_refine_prompts:
    input:
        tasks=rules.arc_tasks.output,
        predictions=rules.evaluate_baseline_gather.output,
        executions=result("evaluate/baseline/executions.parquet"),
        model=rules.model.output,
    output:
        prompts=result("evaluate/refine_prompts.parquet"),
        dropped=result("evaluate/refine_prompts.dropped.parquet"),
    log:
        log_path("evaluate/refine_prompts"),
    benchmark:
        benchmark_path("evaluate_refine_prompts")
    params:
        cfg=refine_prompts_slice(),
        first_half=WORKFLOW.evaluate.first_predictions,
    shell:
        "arc-pipeline --log-file {log} refine-prompts --tasks {input.tasks} --predictions {input.predictions}"
        " --executions {input.executions} --model {input.model} --first-predictions {params.first_half}"
        " --output {output.prompts} --dropped {output.dropped} --config-json {params.cfg}"


rule evaluate_refinement_inference:
    input:
        refinements=rules.evaluate_refine_prompts.output.prompts,
        model=refiner_model,
        adapter=refiner_lora,
    output:
        result("evaluate/refine_{refiner}/predictions.parquet"),
    log:
        log_path("evaluate/refine_{refiner}/inference"),
    benchmark:
        benchmark_path("evaluate_refinement_inference", "{refiner}")
    threads: WORKFLOW.cluster.gpu.threads
    resources:
        **gpu_resources(),
    params:
        cfg=shlex.quote(json.dumps(refinement_inference(), sort_keys=True)),
        adapter=lora_option,
        gpu_memory=gpu_memory_path("evaluate_refinement_inference", "{refiner}"),
    shell:
        REFINEMENT_INFERENCE_SHELL


rule evaluate_execute:
    input:
        predictions=result("evaluate/{run}/predictions.parquet"),
        tasks=rules.arc_tasks.output,
    output:
        executions=result("evaluate/{run}/executions.parquet"),
        metrics=result("evaluate/{run}/metrics.parquet"),
        metrics_md=result("evaluate/{run}/metrics.md"),
        errors=result("evaluate/{run}/errors.parquet"),
        errors_md=result("evaluate/{run}/errors.md"),
    log:
        log_path("evaluate/{run}/execute"),
    benchmark:
        benchmark_path("evaluate_execute", "{run}")
    threads: WORKFLOW.cluster.cpu.threads
    params:
        cfg=shlex.quote(json.dumps(evaluation_execution(), sort_keys=True)),
    shell:
        EVALUATION_EXECUTE_SHELL


rule evaluate:
    input:
        tasks=rules.arc_tasks.output,
        baseline_predictions=rules.evaluate_baseline_gather.output,
        baseline=result("evaluate/baseline/executions.parquet"),
        refinement_predictions=expand(result("evaluate/refine_{refiner}/predictions.parquet"), refiner=REFINERS),
        refinements=expand(result("evaluate/refine_{refiner}/executions.parquet"), refiner=REFINERS),
        training_metrics=rules.train.output.metrics,
        dropped_prompts=rules.evaluate_refine_prompts.output.dropped,
    output:
        **published_outputs(),
        runs=result("evaluate/report/runs.md"),
        runs_html=evaluation_report("runs.html", "runs.rst", "Tables"),
        runs_parquet=result("evaluate/report/runs.parquet"),
        tasks_parquet=result("evaluate/report/tasks.parquet"),
        tasks_md=result("evaluate/report/tasks.md"),
        tasks_html=evaluation_report("tasks.html", "tasks.rst", "Tables"),
        kaggle=evaluation_report("kaggle.html", "kaggle.rst", "Tables"),
        kaggle_md=result("evaluate/report/kaggle.md"),
        kaggle_parquet=result("evaluate/report/kaggle.parquet"),
        submission=result("evaluate/report/submission.json"),
        errors=evaluation_report("errors.html", "errors.rst", "Tables"),
        errors_md=result("evaluate/report/errors.md"),
        errors_parquet=result("evaluate/report/errors.parquet"),
        error_bars=evaluation_report("errors.png", "error_bars.rst", "Figures"),
        passk=evaluation_report("passk.png", "passk.rst", "Figures"),
        passk_parquet=result("evaluate/report/passk.parquet"),
        training=evaluation_report("training.png", "training.rst", "Figures"),
        examples=evaluation_report("examples.png", "examples.rst", "Figures"),
    log:
        log_path("evaluate/report"),
    benchmark:
        benchmark_path("evaluate")
    params:
        cfg=evaluate_slice(),
        refiners=" ".join(REFINERS),
        adapters=adapters_option(),
        rules=evaluation_execution()["rules"],
        outdir=result("evaluate/report"),
    shell:
        "arc-pipeline --log-file {log} evaluate --tasks {input.tasks}"
        " --baseline-predictions {input.baseline_predictions} --baseline {input.baseline}"
        " --refiners {params.refiners} --refinement-predictions {input.refinement_predictions}"
        " --refinements {input.refinements} --adapters {params.adapters} --training-metrics {input.training_metrics}"
        " --dropped-refinement-prompts {input.dropped_prompts} --execution-rules {params.rules}"
        " --output-dir {params.outdir} --config-json {params.cfg}"
