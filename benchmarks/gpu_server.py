"""The train stage's vLLM server alone: how fast it decodes the requests overlapped generation sends it.

In the 4-GPU layout of issue 31 (a TP-2 server beside 2 training ranks) a two-step request took about 14 s in
training on H100s, where this script measured 9.2 s for the server alone: the gap was the request asking every
split group twice (benchmarks/README.md). It starts, waits for and stops the server as the stage does
(``arc_pipeline.training.launch``) on the GPUs of ``CUDA_VISIBLE_DEVICES``, sends it the
requests ``arc_pipeline.training.processes.overlap`` sends (TRL's ``VLLMClient.generate``: unique prompts, ``n`` =
``num_generations``, the preset's sampling, per-token log-probs), and prints per case the wall time, completion
tokens/s, the server's own prefill and decode time and prefix-cache hits (its Prometheus ``/metrics``) and the
server GPUs' mean utilisation (NVML) during the request. ``--offline`` runs the same requests through an
in-process ``vllm.LLM`` instead, to separate the server's path from the engine's.

    CUDA_VISIBLE_DEVICES=0,1 python3 benchmarks/gpu_server.py --work /tmp/gb --tensor-parallel 2
    CUDA_VISIBLE_DEVICES=2   python3 benchmarks/gpu_server.py --work /tmp/gb --tensor-parallel 1 --offline

``--work`` is ``benchmarks/gpu_grpo.py``'s folder (its random 8B model and refinement prompts, built here when
missing); ``--server-arg`` appends an argument to ``vllm serve`` (repeatable), to try its scheduler settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_bench_inputs beside this file

from gpu_bench_inputs import build_inputs, read_counters


@dataclass(frozen=True)
class Case:
    """One request: ``prompts`` distinct prompts x ``n`` completions each."""

    name: str
    prompts: int
    n: int = 32
    logprobs: int | None = 0
    top_p: float = 0.95
    warm_prefixes: bool = False  # first a 1-token request of the same prompts, so that the n share their prefill


CASES = {
    case.name: case
    for case in (
        Case("2x32", 2),  # overlap_request_steps 2: what the 4-GPU preset's server gets every second step
        Case("2x32-again", 2),  # the same request again (run-to-run spread)
        Case("2x32-no-logprobs", 2, logprobs=None),
        Case("2x32-top-p-1", 2, top_p=1.0),
        Case("2x32-warm-prefixes", 2, warm_prefixes=True),
        Case("1x32", 1),  # one step per request
        Case("3x32", 3),  # overlap_request_steps 3
    )
}


class Utilisation:
    """The mean NVML utilisation of the visible GPUs while the block runs (sampled every 50 ms)."""

    def __enter__(self) -> Utilisation:
        self.samples: list[float] = []
        try:
            from vllm.third_party import pynvml

            pynvml.nvmlInit()
        except Exception:  # no NVIDIA driver (a CPU check of this script): no samples, the mean reads nan
            self.thread = None
            return self
        self.nvml = pynvml
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = [int(i) for i in visible.split(",")] if visible else range(pynvml.nvmlDeviceGetCount())
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.stop = threading.Event()
        self.thread: threading.Thread | None = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(0.05):
            rates = [self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu for handle in self.handles]
            self.samples.append(sum(rates) / len(rates))

    def __exit__(self, *exc_info: object) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")


def prompt_rows(inputs: dict[str, Any]) -> list[list[int]]:
    """The work folder's refinement prompts as token ids, tokenized once for every case."""
    import polars as pl

    from arc_pipeline.models.folder import load_tokenizer

    tokenizer = load_tokenizer(Path(inputs["model"]))
    texts = pl.read_parquet(inputs["dataset"], columns=["prompt"])["prompt"].to_list()
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def measure(
    cases: list[str],
    rows: list[list[int]],
    generate: Callable[[list[list[int]], dict[str, Any]], int],
    counters: Callable[[], dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Each case in turn through ``generate(prompts, sampling)`` (which returns the completion tokens), on prompts
    of its own (8 rows per case: no cache hits from an earlier case), with ``counters`` read around it."""
    results = []
    for index, name in enumerate(cases):
        case = CASES[name]
        prompts = [rows[(8 * index + i) % len(rows)] for i in range(case.prompts)]
        sampling = dict(n=case.n, temperature=1.0, top_p=case.top_p, max_tokens=1024, logprobs=case.logprobs)
        warm_s = 0.0
        if case.warm_prefixes:
            warm_start = time.perf_counter()
            generate(prompts, {**sampling, "n": 1, "max_tokens": 1})
            warm_s = time.perf_counter() - warm_start
        before = counters() if counters else {}
        with Utilisation() as utilisation:
            request_start = time.perf_counter()
            tokens = generate(prompts, sampling)
            seconds = time.perf_counter() - request_start
        after = counters() if counters else {}
        delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
        results.append(row_of(case, seconds, tokens, utilisation.mean, delta, warm_s))
        print(json.dumps(results[-1]), flush=True)
    return results


def run_server(args: argparse.Namespace, rows: list[list[int]], model: Path, config: Any) -> list[dict[str, Any]]:
    """The server as the train stage starts, waits for and stops it (its Supervisor; its output goes to ours)."""
    from trl.generation.vllm_client import VLLMClient

    from arc_pipeline.training.launch import SERVER, server_command, wait_until_healthy
    from arc_pipeline.training.processes.ports import free_ports
    from arc_pipeline.training.processes.supervisor import Supervisor

    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    command = server_command(config, model, port, args.server_arg)
    with Supervisor() as supervisor:
        started = time.perf_counter()
        supervisor.start(SERVER, command)
        wait_until_healthy(f"{url}/health", supervisor, args.start_timeout)
        print(f"server up in {time.perf_counter() - started:.0f} s: {' '.join(command)}", flush=True)
        client = VLLMClient(base_url=url)

        def generate(prompts: list[list[int]], sampling: dict[str, Any]) -> int:
            output = client.generate(prompts=prompts, **sampling)
            return sum(len(ids) for ids in output["completion_ids"])

        return measure(args.cases, rows, generate, lambda: read_counters(url))


def row_of(
    case: Case, seconds: float, tokens: int, utilisation: float, delta: dict[str, float], warm_s: float
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "case": case.name,
        "sequences": case.prompts * case.n,
        "seconds": round(seconds, 2),
        "completion tokens/s": round(tokens / seconds),
        "GPU utilisation %": round(utilisation, 1),
    }
    if warm_s:
        row["warm-up request (s)"] = round(warm_s, 2)
    if delta:
        queries = delta.get("vllm:prefix_cache_queries_total", 0.0)
        row["prompt tokens computed"] = round(delta.get("vllm:prompt_tokens_total", 0.0))
        row["prefix cache hit %"] = (
            round(100 * delta.get("vllm:prefix_cache_hits_total", 0.0) / queries, 1) if queries else None
        )
        requests_done = case.prompts * case.n
        row["prefill s (mean per sequence)"] = round(
            delta.get("vllm:request_prefill_time_seconds_sum", 0.0) / requests_done, 2
        )
        row["decode s (mean per sequence)"] = round(
            delta.get("vllm:request_decode_time_seconds_sum", 0.0) / requests_done, 2
        )
        for name in ("inter_token_latency", "time_per_output_token"):
            count = delta.get(f"vllm:{name}_seconds_count", 0.0)
            if count:
                row["decode step (ms)"] = round(1000 * delta[f"vllm:{name}_seconds_sum"] / count, 2)
                break
        row["preemptions"] = round(delta.get("vllm:num_preemptions_total", 0.0))
    return row


def run_offline(args: argparse.Namespace, rows: list[list[int]], model: Path, config: Any) -> list[dict[str, Any]]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = LLM(
        model=str(model),
        tensor_parallel_size=args.tensor_parallel,
        gpu_memory_utilization=config.vllm_server_gpu_memory_utilization,
        max_model_len=config.max_seq_length,
        dtype="bfloat16",
        logprobs_mode="processed_logprobs",
    )
    print(f"offline engine up in {time.perf_counter() - started:.0f} s", flush=True)

    def generate(prompts: list[list[int]], sampling: dict[str, Any]) -> int:
        inputs = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]
        outputs = llm.generate(inputs, SamplingParams(**sampling), use_tqdm=False)
        return sum(len(completion.token_ids) for output in outputs for completion in output.outputs)

    return measure(args.cases, rows, generate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="benchmarks/gpu_grpo.py's work folder")
    parser.add_argument("--tensor-parallel", type=int, default=1, help="GPUs per replica (the visible GPUs hold it)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--offline", action="store_true", help="an in-process vllm.LLM instead of the server")
    parser.add_argument("--server-arg", action="append", default=[], help="appended to vllm serve's arguments")
    parser.add_argument("--grid-side", type=int, default=12, help="as gpu_grpo.py (prompt length)")
    parser.add_argument("--start-timeout", type=float, default=600.0)
    parser.add_argument(
        "--gpu-memory-utilization", type=float, help="default: train.vllm_server_gpu_memory_utilization's"
    )
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    args = parser.parse_args()

    from arc_pipeline.training.config import TrainConfig

    inputs = build_inputs(args.work, args.grid_side, rows=32)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = len(visible.split(",")) if visible else 1
    config = TrainConfig(
        use_vllm=True, vllm_mode="server", vllm_server_gpus=gpus, vllm_server_tensor_parallel_size=args.tensor_parallel
    )
    if args.gpu_memory_utilization:
        config = config.model_copy(update={"vllm_server_gpu_memory_utilization": args.gpu_memory_utilization})
    run = run_offline if args.offline else run_server
    rows = run(args, prompt_rows(inputs), Path(inputs["model"]), config)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    keys = list(dict.fromkeys(key for row in rows for key in row))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row.get(key, "")) for key in keys) + " |")


if __name__ == "__main__":
    main()
