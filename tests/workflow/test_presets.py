"""A preset given with --configfile stands alone: it never inherits the CPU default's values."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from arc_pipeline.cli import build_parser
from arc_pipeline.training.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def train_config_json(*extra: str) -> dict:
    """The train job's config slice in a dry run (planned in a fresh folder, never the user's own results/)."""
    [(_, config)] = planned_configs("train", *extra)["train"]
    return config


def test_published_preset_does_not_inherit_the_cpu_default() -> None:
    preset = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())
    expected = TrainConfig.model_validate(preset["train"]).model_dump(mode="json")  # the preset, defaults filled
    assert train_config_json("--configfile", "config/barc-multiturn.yaml") == expected


def test_without_configfile_the_embedded_default_applies() -> None:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert train_config_json() == TrainConfig.model_validate(default["train"]).model_dump(mode="json")


def planned_configs(target: str, *extra: str) -> dict[str, list[tuple[list[str], dict]]]:
    """Per stage command (``inference``, ``execute``, ...) of a dry run: its arguments and config slice
    (``{}`` for the helper commands that take none: ``shard``, ``gather``, ...).

    Planned in a temporary folder: the tests never read or touch the user's own ``results/``.
    """
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CONDOR_CONFIG="/dev/null")
    extra = tuple(str(REPO / arg) if arg.startswith("config/") else arg for arg in extra)
    with tempfile.TemporaryDirectory() as workdir:
        result = subprocess.run(
            [
                str(bin_dir / "snakemake"),
                "--snakefile",
                str(REPO / "Snakefile"),
                "--directory",
                workdir,
                target,
                "-n",
                "-p",
                "--cores",
                "1",
                *extra,
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    planned: dict[str, list[tuple[list[str], dict]]] = {}
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith("Shell command: arc-pipeline ") or ("arc-pipeline " in line and "--config-json" in line):
            words = shlex.split(re.sub(r"^.*?arc-pipeline", "arc-pipeline", line))
            # the command after the global options (GPU jobs: --compile-cache, --gpu-memory-file), as the CLI reads it
            command = build_parser().parse_known_args(words[1:])[0].command
            config = json.loads(words[-1]) if "--config-json" in words else {}
            planned.setdefault(command, []).append((words, config))
    return planned


def test_published_preset_evaluates_with_its_own_context_and_timeout() -> None:
    planned = planned_configs("evaluate", "--configfile", "config/barc-multiturn.yaml")
    [(_, prompts)] = planned["refine-prompts"]
    assert prompts == {"refinement_prompts": 8, "max_model_len": 14500, "max_tokens": 1024, "double_bos": False}
    contexts = {"--refinements" in words: config["max_model_len"] for words, config in planned["inference"]}
    assert contexts == {True: 14500, False: 9700}  # refinement runs vs BARC and baseline inference
    timeouts = {"evaluate/" in " ".join(words): config["timeout_s"] for words, config in planned["execute"]}
    assert timeouts == {True: 5.0, False: 1.0}
    assert all(config["rules"] == "published" for _, config in planned["execute"])
    [(words, _)] = planned["evaluate"]
    assert words[words.index("--execution-rules") + 1] == "published"
    assert "--dropped-refinement-prompts" in words


def test_default_config_evaluates_with_the_inference_context() -> None:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    planned = planned_configs("evaluate")
    [(_, prompts)] = planned["refine-prompts"]
    assert prompts["max_model_len"] == default["inference"]["max_model_len"]
    assert {config["max_model_len"] for _, config in planned["inference"]} == {default["inference"]["max_model_len"]}
    assert {config["timeout_s"] for _, config in planned["execute"]} == {default["execute"]["timeout_s"]}
    [(words, _)] = planned["evaluate"]
    assert words[words.index("--execution-rules") + 1] == "strict"


def writes(words: list[str], path: str) -> bool:
    return any(word.endswith(path) for word in words)


def test_sft_rules_join_the_dag_only_when_switched_on() -> None:
    """sft.enabled adds the SFT refiner's jobs to a preset's run: the base model samples
    sft_dataset.samples_per_prompt answers per training-set refinement prompt in sft_dataset.shards GPU jobs,
    they run on every BARC part's tasks, and the sft stage's slice leaves the switch out (turning it on reruns
    nothing trained)."""
    preset = ("--configfile", "config/barc-multiturn.yaml")
    default = planned_configs("all", *preset)
    assert not {"sft", "sft-dataset"} & set(default)
    assert "--init-adapter" not in default["train"][0][0]
    planned = planned_configs(
        "all", *preset, "--config", "sft={enabled: true}", "sft_dataset={samples_per_prompt: 4, shards: 3}"
    )
    [(sft_words, sft_config)] = planned["sft"]
    assert "enabled" not in sft_config and sft_words[sft_words.index("--dataset") + 1].endswith(
        "sft_dataset/sft.parquet"
    )
    [(_, dataset_config)] = planned["sft-dataset"]
    assert dataset_config == {"samples_per_prompt": 4, "shards": 3, "max_per_task": 4, "keep": "solved"}
    assert_sft_sampling_sharded(planned, 3)
    [(execute_words, _)] = [(w, c) for w, c in planned["execute"] if writes(w, "sft_dataset/executions.parquet")]
    assert execute_words[execute_words.index("--predictions") + 1].endswith("sft_dataset/predictions.parquet")
    n_parts = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())["barc"]["split"]["n_parts"]
    assert sum("barc_split/part" in word for word in execute_words) == n_parts
    assert "--init-adapter" not in planned["train"][0][0]  # sft on: the RL refiner still starts afresh
    assert len(planned["train"]) == 1  # no second GRPO job without sft.compare_sft_then_rl
    [(words, _)] = planned["evaluate"]
    assert words[words.index("--refiners") + 1 : words.index("--refinement-predictions")] == ["base", "rl", "sft"]


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def assert_sft_sampling_sharded(planned: dict, n_shards: int) -> None:
    """The refinement prompts split into ``n_shards`` blocks, one GPU job sampling each, one gather of them."""
    shards = [words for words, _ in planned["shard"] if "refinements" in words]  # --schema refinements
    assert sorted(option(words, "--index") for words in shards) == [str(k) for k in range(n_shards)]
    for words in shards:
        assert option(words, "--input").endswith("refine_dataset/refinement.parquet")
        assert option(words, "--count") == str(n_shards)
        assert option(words, "--output").endswith(f"sft_dataset/shard{option(words, '--index')}.prompts.parquet")
    sampling = [(words, config) for words, config in planned["inference"] if "sft_dataset/" in " ".join(words)]
    assert len(sampling) == n_shards
    for words, config in sampling:
        shard = re.fullmatch(r".*sft_dataset/shard(\d+)\.prompts\.parquet", option(words, "--refinements"))
        assert shard is not None, words
        assert option(words, "--output").endswith(f"sft_dataset/shard{shard[1]}.predictions.parquet")
        assert (config["n"], config["n_predictions"]) == (4, 4)
    [gather] = [words for words, _ in planned["gather"] if writes(words, "sft_dataset/predictions.parquet")]
    inputs = gather[gather.index("--inputs") + 1 : gather.index("--output")]
    assert all("sft_dataset/shard" in path for path in inputs)
    assert [path.rsplit("/", 1)[1] for path in inputs] == [f"shard{k}.predictions.parquet" for k in range(n_shards)]
    assert option(gather, "--schema") == "predictions"


def test_sft_then_rl_makes_the_sft_adapter_an_input_of_train() -> None:
    planned = planned_configs(
        "train", "--configfile", "config/barc-multiturn.yaml", "--config", "train={init_adapter: sft}"
    )
    assert {"sft", "sft-dataset"} <= set(planned)  # the adapter is built first
    [(words, config)] = planned["train"]
    assert words[words.index("--init-adapter") + 1].endswith("sft/adapter") and config["init_adapter"] == "sft"


def adapter_of(words: list[str]) -> str | None:
    return words[words.index("--adapter") + 1] if "--adapter" in words else None


def test_one_evaluation_compares_every_refiner() -> None:
    """sft.enabled adds refiner sft (the sft rule's adapter); sft.compare_sft_then_rl adds a second GRPO job from
    that adapter (train_sft_rl: same command, its own folder, --init-adapter) and refiner sft_rl. runs.md names
    each refiner's adapter (--adapters)."""
    switches = ("--config", "sft={enabled: true, compare_sft_then_rl: true}")
    planned = planned_configs("all", *switches)
    trains = {words[words.index("--output") + 1]: (words, config) for words, config in planned["train"]}
    assert set(trains) == {"results/train/adapter", "results/train_sft_rl/adapter"}
    rl_words, rl_config = trains["results/train/adapter"]
    sft_rl_words, sft_rl_config = trains["results/train_sft_rl/adapter"]
    assert "--init-adapter" not in rl_words and rl_config["init_adapter"] == "none"  # RL alone
    assert sft_rl_words[sft_rl_words.index("--init-adapter") + 1] == "results/sft/adapter"
    assert sft_rl_config == dict(rl_config, init_adapter="sft")  # otherwise train's settings
    assert writes(sft_rl_words, "train_sft_rl/checkpoints") and writes(sft_rl_words, "logs/train_sft_rl.log")
    refinements = {
        next(w for w in words if w.endswith("/predictions.parquet")): adapter_of(words)
        for words, _ in planned["inference"]
        if "--refinements" in words and writes(words, "predictions.parquet") and "evaluate/refine_" in " ".join(words)
    }
    assert refinements == {
        "results/evaluate/refine_base/predictions.parquet": None,
        "results/evaluate/refine_rl/predictions.parquet": "results/train/adapter",
        "results/evaluate/refine_sft/predictions.parquet": "results/sft/adapter",
        "results/evaluate/refine_sft_rl/predictions.parquet": "results/train_sft_rl/adapter",
    }
    executed = {w for words, _ in planned["execute"] for w in words if w.startswith("results/evaluate/refine_")}
    assert {f"results/evaluate/refine_{name}/executions.parquet" for name in ("sft", "sft_rl")} <= executed
    [(words, _)] = planned["evaluate"]
    assert words[words.index("--refiners") + 1 : words.index("--refinement-predictions")] == [
        "base",
        "rl",
        "sft",
        "sft_rl",
    ]
    assert words[words.index("--adapters") + 1 : words.index("--training-metrics")] == [
        "rl=results/train/adapter",
        "sft=results/sft/adapter",
        "sft_rl=results/train_sft_rl/adapter",
    ]

    # an sft training setting is in the params of the sft job alone: changing it reruns the sft rule and, through
    # its adapter, only what depends on it (train_sft_rl, the sft and sft_rl refiners, the report)
    changed = planned_configs("all", "--config", "sft={enabled: true, compare_sft_then_rl: true, learning_rate: 3e-4}")

    def commands(plan: dict) -> dict[str, list[str]]:
        return {command: sorted(shlex.join(words) for words, _ in runs) for command, runs in plan.items()}

    before, after = commands(planned), commands(changed)
    assert {command for command in before if before[command] != after[command]} == {"sft"}


def test_the_published_search_plans_each_refiners_rounds_and_a_new_round_alone(tmp_path) -> None:
    """barc-multiturn searches 64 + 64 (the one-round table's own run, not computed again) and 32 + 3 x 32 for every
    refiner: one search-prompts / inference / execute job per refiner and round, round r sampled as turn r + 1. A
    schedule whose last round is split in two plans those two rounds' jobs and leaves every earlier round's settings
    as they were (so Snakemake reruns none of them)."""
    planned = planned_configs("all", "--configfile", "config/barc-multiturn.yaml")

    def rounds(plan: dict) -> dict[tuple[str, str], dict]:
        found = {}
        for words, config in plan["search-prompts"]:
            _, _, refiner, prefix, _ = words[words.index("--output") + 1].rsplit("/", 4)
            found[(refiner, prefix)] = {**config, "initial": int(words[words.index("--initial") + 1])}
        return found

    published = rounds(planned)
    prefixes = ["32+32", "32+32+32", "32+32+32+32"]
    assert set(published) == {(refiner, prefix) for refiner in ("base", "rl") for prefix in prefixes}
    assert [published[("rl", prefix)]["round"] for prefix in prefixes] == [1, 2, 3]
    assert {config["refinement_prompts"] for config in published.values()} == {4}  # 32 = 4 prompts x n 8
    assert {config["initial"] for config in published.values()} == {32}
    turns = {
        words[words.index("--output") + 1]: config["turn"]
        for words, config in planned["inference"]
        if "/evaluate/search/" in words[words.index("--output") + 1]
    }
    assert turns["results/barc-multiturn/evaluate/search/rl/32+32+32+32/predictions.parquet"] == 4
    assert sorted(turns.values()) == [2, 2, 3, 3, 4, 4]
    [(search, _)] = planned["search"]
    # round 1 of 64 + 64 is the one-round table's own run
    assert "rl:64+64:results/barc-multiturn/evaluate/refine_rl/executions.parquet" in search

    split = tmp_path / "split.yaml"
    split.write_text("base: barc-multiturn\nevaluate:\n  search:\n    schedules: [[64, 64], [32, 32, 32, 16, 16]]\n")
    changed = rounds(planned_configs("all", "--configfile", str(split)))
    kept = {(refiner, prefix) for refiner in ("base", "rl") for prefix in prefixes[:2]}
    new = {(refiner, prefix) for refiner in ("base", "rl") for prefix in ("32+32+32+16", "32+32+32+16+16")}
    assert set(changed) == kept | new
    assert {key: changed[key] for key in kept} == {key: published[key] for key in kept}
    assert {changed[key]["refinement_prompts"] for key in new} == {2}
