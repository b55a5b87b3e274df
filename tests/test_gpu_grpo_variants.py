"""Every variant of benchmarks/gpu_grpo.py is a train config the stage accepts, so a lent GPU's minutes are not
spent on a variant the settings checks refuse at its start (a setting renamed, a combination made invalid)."""

from __future__ import annotations

import pytest

from arc_pipeline.training.config import TrainConfig
from tests.benchmark_scripts import load_benchmark

GPU_GRPO = load_benchmark("gpu_grpo")


@pytest.mark.parametrize("name", sorted(GPU_GRPO.VARIANTS))
def test_each_variant_is_a_valid_train_config(name):
    config = TrainConfig(**{**GPU_GRPO.BASE_SETTINGS, **GPU_GRPO.VARIANTS[name]})
    assert config.use_vllm


# where the benchmark's step departs from config/barc-multiturn.yaml's train settings on purpose: one group of 32
# completions for the preset's 4 of 8 (the same sequences and passes), random weights' completions kept whole (they
# never stop), the project's execution rules and worker count, and logging every step without checkpoints
BENCHMARK_ONLY = {
    "num_generations",
    "task_repeats",
    "mask_truncated_completions",
    "execution_workers",
    "execution_rules",
    "save_steps",
    "logging_steps",
    "report_to",
}


def test_the_presets_step_is_the_published_presets_train_settings():
    """``PRESETS_STEP`` (the step benchmarks/README.md times as the presets') is config/barc-multiturn.yaml's train
    section in every other field: a lever the preset gains or drops must move the benchmark with it."""
    from pathlib import Path

    import yaml

    from arc_pipeline.config.prepare import prepare_config

    repo = Path(__file__).resolve().parents[1]
    preset = "config/barc-multiturn.yaml"
    published = prepare_config(yaml.safe_load((repo / preset).read_text()), {}, repo, [preset]).train.model_dump()
    step = TrainConfig(**{**GPU_GRPO.BASE_SETTINGS, **GPU_GRPO.PRESETS_STEP}).model_dump()
    differ = {name for name in step if step[name] != published[name]}
    assert differ == BENCHMARK_ONLY
    assert step["num_generations"] * step["task_repeats"] == published["num_generations"] * published["task_repeats"]


def test_overlap_figures_leave_out_the_steps_with_no_decode_beside_them():
    """An overlapped run's last step trains alone (nothing left to decode for), at about half the overlapped
    step's time on one H200: averaging it in made the overlap look faster than its steady state."""
    import polars as pl

    wide = pl.DataFrame({"step": [1, 2, 3, 4, 5, 6], "time/step": [22.0, 14.0, 13.0, 15.0, 14.0, 8.0]})
    on_policy = GPU_GRPO.steady_steps(wide, {"overlap_generation": False})
    assert on_policy["step"].to_list() == [2, 3, 4, 5, 6]
    overlapped = GPU_GRPO.steady_steps(wide, {"overlap_generation": True, "overlap_request_steps": 1})
    assert overlapped["step"].to_list() == [2, 3, 4, 5]
    assert overlapped["time/step"].mean() == 14.0
    # two steps per request: whole windows of two only (the request sent during step 4 holds step 6 alone)
    two_per_request = GPU_GRPO.steady_steps(wide, {"overlap_generation": True, "overlap_request_steps": 2})
    assert two_per_request["step"].to_list() == [2, 3]
    ten = pl.DataFrame({"step": list(range(1, 11)), "time/step": [25.0] + [17.0, 8.0] * 4 + [8.0]})
    two_of_ten = GPU_GRPO.steady_steps(ten, {"overlap_generation": True, "overlap_request_steps": 2})
    assert two_of_ten["step"].to_list() == [2, 3, 4, 5, 6, 7] and two_of_ten["time/step"].mean() == 12.5
    three = GPU_GRPO.steady_steps(
        pl.DataFrame({"step": list(range(1, 31))}), {"overlap_generation": True, "overlap_request_steps": 3}
    )
    assert three["step"].to_list() == list(range(2, 26))
    # without the decode ahead: whole windows after the first, whose first step decoded the request alone
    batched = {"overlap_generation": True, "overlap_request_steps": 2, "overlap_decode_ahead": False}
    assert GPU_GRPO.steady_steps(ten, batched)["step"].to_list() == [3, 4, 5, 6, 7, 8, 9, 10]
    batched_four = GPU_GRPO.steady_steps(ten, {**batched, "overlap_request_steps": 4})
    assert batched_four["step"].to_list() == [5, 6, 7, 8]
    # a run too short to lose its tail keeps what it has
    short = GPU_GRPO.steady_steps(wide.head(2), {"overlap_generation": True, "overlap_request_steps": 1})
    assert short["step"].to_list() == [2]


def test_the_peaked_copy_rewrites_the_head_alone_and_a_work_folder_keeps_one_head(tmp_path):
    """gpu_grpo.py --peaked-logits: the copy's LM head gives unit-RMS hidden states logits of the asked spread, every
    other weight is the random model's (its files hard links), and a work folder built with one head refuses runs
    with another (their figures would share the folder's cached runs)."""
    import json

    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    inputs = load_benchmark("gpu_bench_inputs")
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = LlamaConfig(vocab_size=2000, num_key_value_heads=2, tie_word_embeddings=False, **shape)
    model_dir = tmp_path / "model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    before = (model_dir / "model.safetensors").read_bytes()

    peaked_dir = inputs.peaked_model(model_dir, logit_std=6.0)
    assert inputs.peaked_model(model_dir, logit_std=6.0) == peaked_dir  # built once
    assert (model_dir / "model.safetensors").read_bytes() == before
    assert (peaked_dir / "config.json").stat().st_ino == (model_dir / "config.json").stat().st_ino
    original, peaked = (load_file(folder / "model.safetensors") for folder in (model_dir, peaked_dir))
    hidden = torch.randn(512, 64)  # unit RMS per row, as after the final RMSNorm of scale 1
    assert (hidden @ peaked["lm_head.weight"].float().T).std().item() == pytest.approx(6.0, rel=0.05)
    assert (hidden @ original["lm_head.weight"].float().T).std().item() < 0.5
    assert torch.all(original["model.norm.weight"] == 1.0)  # what the spread's arithmetic assumes
    assert original.keys() == peaked.keys()
    assert all(torch.equal(tensor, peaked[name]) for name, tensor in original.items() if name != "lm_head.weight")

    work = tmp_path / "work"
    work.mkdir()
    (work / "inputs.json").write_text(json.dumps({"rows": 8, "logit_std": None, "model": str(model_dir)}))
    with pytest.raises(SystemExit, match="logit std None"):
        inputs.build_inputs(work, grid_side=10, rows=8, logit_std=8.0)
    assert inputs.build_inputs(work, grid_side=10, rows=8)["model"] == str(model_dir)


def test_the_stack_sampler_watches_from_its_step_to_the_end_of_training(tmp_path):
    """gpu_grpo.py --stack-samples STEP: nothing is sampled before optimizer step STEP begins; from then the other
    threads of the process (the colocated engine's, the overlap's) are sampled until training ends, and the counts
    land in the variant's folder for the report."""
    import json
    import threading
    import time
    from types import SimpleNamespace

    stacks = load_benchmark("engine_stacks")
    callback = GPU_GRPO.stack_sampler(3, tmp_path / "stacks.json")
    stop = threading.Event()

    def decoding_beside_training() -> None:
        while not stop.is_set():
            sum(range(200))

    worker = threading.Thread(target=decoding_beside_training, name="decode")
    worker.start()
    try:
        for step in (0, 1):  # steps 1 and 2 begin: not yet
            callback.on_step_begin(None, SimpleNamespace(global_step=step), None)
            assert stacks.stop_sampling(None) == {}
        callback.on_step_begin(None, SimpleNamespace(global_step=2), None)  # step 3 begins
        time.sleep(0.3)
        callback.on_train_end(None, SimpleNamespace(global_step=4), None)
    finally:
        stop.set()
        worker.join()
    result = json.loads((tmp_path / "stacks.json").read_text())
    assert result["from_step"] == 3 and result["samples"] >= 10
    assert any(name == "decode" and "decoding_beside_training" in stack[0] for name, stack, _ in result["stacks"])
    assert not any(thread.name == "stack-sampler" for thread in threading.enumerate())


def test_the_gpus_clocks_and_power_are_read_over_the_measured_steps_on_an_older_driver_too(tmp_path, monkeypatch):
    """gpu_grpo.py reads each GPU's clock, power and clock-limit reasons beside its memory, so that two hosts' steps
    of one variant can be told apart by their GPUs (11.6 s against 14.2 s on two H200s). A driver that does not know
    a field keeps the others; only samples taken while a measured step ran count."""
    import json
    import os
    import time

    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    # an older driver: no clocks_event_reasons (nvidia-smi names the field it refuses, on stdout, and exits 2)
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in *clocks_event_reasons*) echo \'Field "clocks_event_reasons.active" is not a valid field '
        "to query.'; exit 2;; esac\n"
        'case "$1" in *driver_version*) echo "0, NVIDIA H200, 570.86, Default, Enabled, 700.00, 1980, 3201";;\n'
        '*) echo "0, 71680, 1755, 3201, 640.5, 61, 100";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    facts = GPU_GRPO.query_gpus(GPU_GRPO.GPU_FACTS)
    assert facts["0"]["driver_version"] == "570.86" and facts["0"]["clocks.max.sm"] == "1980"
    state = GPU_GRPO.query_gpus(GPU_GRPO.GPU_STATE)
    assert state["0"]["clocks.sm"] == "1755" and "clocks_event_reasons.active" not in state["0"]
    # the sampler's one call per sample gives the memory (GiB) and the state together
    trace = GPU_GRPO.GpuMemoryTrace(tmp_path / "no-metrics-yet.parquet", tmp_path / "trace.jsonl", os.getpid(), 0.05)
    deadline = time.monotonic() + 30
    with trace:
        while not (tmp_path / "trace.jsonl").is_file() or not (tmp_path / "trace.jsonl").read_text().strip():
            assert time.monotonic() < deadline, "the sampler wrote no sample in 30 s"
            time.sleep(0.05)
    sample = json.loads((tmp_path / "trace.jsonl").read_text().splitlines()[0])
    assert sample["step"] == 0 and sample["used_gib"] == {"0": 70.0} and sample["gpus"]["0"]["power.draw"] == "640.5"

    (tmp_path / "gpu-host.json").write_text(json.dumps(facts))
    samples = [
        # step 1 (the engine's warm-up) runs at a low clock; steps 2-3 are measured; step 4 is not
        *({"step": 0, "gpus": {"0": {"clocks.sm": "900", "power.draw": "300"}}} for _ in range(3)),
        {"step": 1, "gpus": {"0": {"clocks.sm": "1980", "power.draw": "690", "temperature.gpu": "70",
                                   "clocks_event_reasons.active": "0x0000000000000000"}}},
        {"step": 1, "gpus": {"0": {"clocks.sm": "1500", "power.draw": "700", "temperature.gpu": "74",
                                   "clocks_event_reasons.active": "0x0000000000000004"}}},
        {"step": 2, "gpus": {"0": {"clocks.sm": "1600", "power.draw": "[N/A]", "temperature.gpu": "72",
                                   "clocks_event_reasons.active": "0x0000000000000004"}}},
        {"step": 3, "gpus": {"0": {"clocks.sm": "600", "power.draw": "100", "temperature.gpu": "90"}}},
        {"step": 2},  # a sample from before this change: memory only
    ]  # fmt: skip
    (tmp_path / "gpu-memory.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    rows = GPU_GRPO.gpu_state_rows(tmp_path / "gpu-memory.jsonl", ["0"], measured=[2, 3])
    assert rows == {
        "GPU driver, compute mode": "570.86, Default",
        "GPU SM clock, median of 3 samples (MHz)": "1600 of 1980",
        "GPU power draw, median (W)": "695 of 700.00",
        "GPU temperature, highest (C)": "74",
        "GPU clock-limit reasons (share of samples)": "0x0000000000000000 33%, 0x0000000000000004 67%",
    }


def test_the_step_profiler_records_only_its_step_and_writes_the_host_time_table(tmp_path):
    """The profiled variants' callback: the operators of optimizer step N alone, sorted by host time (on a CPU the
    only table; on a GPU after the GPU-time one), for the host-bound training pass."""
    import types

    import torch

    callback = GPU_GRPO.step_profiler(2, tmp_path / "profile.txt")
    x = torch.ones(64, 64)
    steps = ((0, lambda: torch.mm(x, x)), (1, lambda: torch.cumsum(x, dim=0)))  # the step before is not recorded
    for step, work in steps:
        state = types.SimpleNamespace(global_step=step)
        callback.on_step_begin(None, state, None)
        work()
        callback.on_step_end(None, state, None)
    table = (tmp_path / "profile.txt").read_text()
    assert "sorted by self_cpu_time_total" in table
    assert "aten::cumsum" in table
    assert "aten::mm" not in table
