"""Every ``--config '...'`` switch that a preset's comments or a doc's command gives is accepted over its preset.

A preset that gains a setting can break the switches written around it (the published run's on-policy switch
turned off the correction that the fp8 rollouts of config/barc-multiturn.yaml need); a reader learns it from a
ConfigError. Each switch here is read by Snakemake's own ``--config`` parser and layered as the workflow layers it
(``prepare_config``, the code rules/common.smk runs) over the preset the comment belongs to, or the
``--configfile`` its command names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from snakemake.cli import parse_config

from arc_pipeline.config.prepare import prepare_config

REPO = Path(__file__).resolve().parents[1]
SWITCH = re.compile(r"--config '([^']*)'")
CONFIGFILE = re.compile(r"--configfile ((?:config/[\w.-]+\.yaml ?)+)")


def switches_in(text: str, where: str, preset: str | None) -> list[tuple[str, str, str]]:
    """(where, preset, switch) for each ``--config '...'`` of ``text``, layered over the ``--configfile`` that
    its command names (the text from the last ``snakemake`` before it), else over ``preset`` (None: skipped)."""
    found = []
    for match in SWITCH.finditer(text):
        named = CONFIGFILE.findall(text[: match.start()].rsplit("snakemake ", 1)[-1])
        over = named[-1].split()[0] if named else preset
        if over is not None:
            found.append((where, over, " ".join(match.group(1).split())))
    return found


def preset_comment_switches() -> list[tuple[str, str, str]]:
    """The switches in each preset's comments (its comment lines joined), over that preset unless named."""
    found = []
    for path in sorted((REPO / "config").glob("*.yaml")):
        lines = path.read_text().splitlines()
        comments = " ".join(line.split("#", 1)[1].strip() for line in lines if "#" in line)
        found += switches_in(comments, path.name, f"config/{path.name}")
    return found


def doc_command_switches() -> list[tuple[str, str, str]]:
    """The switches of the docs' commands that name a preset (a quoted switch may span lines)."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        found += switches_in(path.read_text().replace("\\\n", " "), path.name, None)
    return found


SWITCHES = preset_comment_switches() + doc_command_switches()


def test_the_switches_are_found() -> None:
    """The published run's sampling switch (config/barc-multiturn.yaml) and the 2-GPU canary's (docs/canary.md)
    are among them: a parser that finds nothing would pass the test below."""
    where = {(name, preset) for name, preset, _ in SWITCHES}
    assert ("barc-multiturn.yaml", "config/barc-multiturn.yaml") in where
    assert ("canary.md", "config/canary-gpu.yaml") in where


@pytest.mark.parametrize(("where", "preset", "switch"), SWITCHES, ids=[f"{w}:{p}" for w, p, _ in SWITCHES])
def test_documented_switch_is_accepted_over_its_preset(where: str, preset: str, switch: str) -> None:
    config = yaml.safe_load((REPO / preset).read_text())
    prepare_config(config, parse_config([switch]), REPO, [preset])  # a ConfigError names the field that refuses it


def test_the_published_sampling_switch_turns_every_sampling_lever_off() -> None:
    """config/barc-multiturn.yaml's switch back to the published run's sampling leaves nothing of the preset's
    own: on-policy, uncorrected, bf16 rollout weights and KV cache, PEFT's projections."""
    [switch] = [s for name, _, s in SWITCHES if name == "barc-multiturn.yaml" and "overlap_generation" in s]
    config = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())
    train = prepare_config(config, parse_config([switch]), REPO).train
    assert not train.overlap_generation and not train.vllm_importance_sampling_correction
    assert train.vllm_quantization == "none" and train.vllm_kv_cache_dtype == "auto" and not train.fused_lora
    assert train.overlap_request_steps == 1


YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def doc_train_sections() -> list[tuple[str, str]]:
    """(doc, block) for each ``train:`` section the docs give to write into a file of one's own: docs/cluster.md's
    and docs/multi-gpu.md's layouts, each over config/barc-multiturn.yaml."""
    return [
        (path.name, block)
        for path in sorted((REPO / "docs").glob("*.md"))
        for block in YAML_BLOCK.findall(path.read_text())
        if block.startswith("train:")
    ]


TRAIN_SECTIONS = doc_train_sections()


def test_the_docs_train_sections_are_found() -> None:
    assert {doc for doc, _ in TRAIN_SECTIONS} >= {"cluster.md", "multi-gpu.md"}


@pytest.mark.parametrize(("doc", "block"), TRAIN_SECTIONS, ids=[doc for doc, _ in TRAIN_SECTIONS])
def test_documented_train_section_is_accepted_over_the_published_preset(doc: str, block: str) -> None:
    """A layout's section over the preset it extends: a setting the preset gained for its colocated engine (the
    fp8 KV cache) must be undone in each server layout's section, or a reader meets a ConfigError."""
    preset = "config/barc-multiturn.yaml"
    config = yaml.safe_load((REPO / preset).read_text())
    prepare_config(config, yaml.safe_load(block), REPO, [preset])
