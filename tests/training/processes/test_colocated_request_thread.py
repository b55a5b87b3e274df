"""train.overlap_generation in colocate mode asks the engine in the training process from a background thread
(arc_pipeline/training/processes/overlap.py): a real vLLM engine, in the process as TRL builds it, answers a
request made from another thread, while this thread computes, with the completions it gives the main thread for
the same seeds. (Whether the decode then runs beside training on a GPU is a GPU measurement: benchmarks/gpu_grpo.py
variant chunked-2k-overlap.)"""

from __future__ import annotations

import textwrap

import pytest
from training_helpers import result_of_engine_script

THREAD_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    import torch
    from vllm import LLM, SamplingParams

    # a tenth of the memory: on the CPU it is what the engine reserves, beside the suite's other worker
    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
              gpu_memory_utilization=0.1)
    prompts = [{"prompt_token_ids": [0, 7, 8, 9, 10 + i]} for i in range(4)]
    params = [SamplingParams(max_tokens=12, temperature=1.0, seed=100 + i, logprobs=0, ignore_eos=True)
              for i in range(4)]

    def completions():
        outputs = llm.generate(prompts, params, use_tqdm=False)
        return [[list(o.outputs[0].token_ids), [next(iter(t.values())).logprob for t in o.outputs[0].logprobs]]
                for o in outputs]

    from_main = completions()
    answer = {}

    def request():
        answer["completions"] = completions()

    worker = threading.Thread(target=request, name="overlap-generation")
    worker.start()
    products = 0
    while worker.is_alive():  # the training thread goes on meanwhile
        (torch.randn(128, 128) @ torch.randn(128, 128)).sum().item()
        products += 1
    worker.join()
    print("RESULT " + json.dumps({"main": from_main, "thread": answer.get("completions"), "products": products}))
    """
)


@pytest.mark.slow
def test_the_engine_in_the_process_answers_a_request_from_another_thread(tiny_model, tmp_path):
    read = result_of_engine_script(THREAD_SCRIPT, tiny_model, tmp_path)
    assert read["thread"] is not None, "the request on the background thread did not answer"
    for (tokens, logprobs), (thread_tokens, thread_logprobs) in zip(read["main"], read["thread"], strict=True):
        assert thread_tokens == tokens and len(tokens) == 12
        assert thread_logprobs == pytest.approx(logprobs, abs=1e-5)
    assert len({tuple(tokens) for tokens, _ in read["main"]}) == 4  # four different seeded samples
    assert read["products"] > 0  # the main thread was not blocked while the request decoded
