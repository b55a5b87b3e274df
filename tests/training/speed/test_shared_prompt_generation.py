"""transformers' generate with each prompt prefilled once (arc_pipeline/training/speed/shared_prompt_generation.py),
on the policy as the train stage builds it (the tiny model, LoRA): the same sampled tokens as the unshared
generate, with the repeated prompts' tokens through the model once."""

from __future__ import annotations

import pytest
import torch

from arc_pipeline.training.speed.shared_prompt_generation import SharedPromptGeneration
from tests.training.speed.test_chunked_backward import VaryingReward, config
from tests.training.training_helpers import grpo_trainer

pytestmark = pytest.mark.slow


def left_padded_batch(tokenizer, prompts: list[str], copies: list[int]) -> dict[str, torch.Tensor]:
    """Each prompt ``copies`` times, the copies interleaved (the shared path must not rely on TRL's order)."""
    rows = [prompt for round_ in range(max(copies)) for prompt, n in zip(prompts, copies) if round_ < n]
    return tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False)


def test_a_repeated_prompt_is_prefilled_once_and_samples_what_unshared_generate_samples(
    tiny_model, refinement_dataset, tmp_path
) -> None:
    from transformers import GenerationConfig

    trainer, dataset = grpo_trainer(config(), tiny_model, refinement_dataset(3), tmp_path / "run", VaryingReward())
    tokenizer = trainer.processing_class
    prompts = [row["prompt"] for row in dataset.select(range(3))]  # rendered already (load_refinement_dataset)
    # three different prompts, of three lengths: rows of different left padding
    prompts = [prompt[: len(prompt) * keep // 4] for prompt, keep in zip(prompts, (4, 3, 2))]
    batch = left_padded_batch(tokenizer, prompts, copies=[3, 1, 4])
    assert len({len(tokenizer(p, add_special_tokens=False).input_ids) for p in prompts}) == 3
    sampling = GenerationConfig(
        do_sample=True, temperature=3.0, top_k=4, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id
    )
    model = trainer.model  # the PeftModel TRL's generation unwraps to
    seen: list[tuple[int, int]] = []
    embeddings = model.get_input_embeddings()
    hook = embeddings.register_forward_hook(lambda _module, inputs, _output: seen.append(tuple(inputs[0].shape)))
    try:
        with torch.no_grad():
            torch.manual_seed(7)
            unshared = model.generate(**batch, generation_config=sampling)
            passes_unshared, seen[:] = list(seen), []
            shared_path = SharedPromptGeneration().attach(trainer)
            torch.manual_seed(7)
            shared = model.generate(**batch, generation_config=sampling)
    finally:
        hook.remove()

    width = batch["input_ids"].shape[1]
    # The same tokens: the batch and its random draws are the same, and the logits differ at most by float32
    # rounding (another batch size in the prefill's matrix products, the last prompt token in a decode step), about
    # 1e-7 relative; a draw changes only where its uniform number falls that close to a boundary of the top-4
    # cumulative probabilities: about 1e-6 for each of these 96 draws, on any CPU.
    assert torch.equal(shared, unshared)
    assert len(set(map(tuple, unshared[:, width:].tolist()))) > 3  # and sampled: rows differ
    # unshared: all 8 rows' prompts at once; shared: the 3 distinct prompts less their last token, then the
    # 8 rows from their last prompt token on, one token a pass
    assert passes_unshared[0] == (8, width)
    assert seen[0] == (3, width - 1) and seen[1] == (8, 1) and all(shape == (8, 1) for shape in seen[1:])
    assert (shared_path.rows, shared_path.prefilled_rows) == (8, 3)

    # nothing to share (every prompt once), or a call it does not know: generate as it was
    distinct = left_padded_batch(tokenizer, prompts, copies=[1, 1, 1])
    torch.manual_seed(7)
    with torch.no_grad():
        alone = model.generate(**distinct, generation_config=sampling)
        beams = model.generate(**batch, generation_config=GenerationConfig(num_beams=2, max_new_tokens=2))
    assert alone.shape[0] == 3 and beams.shape[0] == 8
    assert (shared_path.rows, shared_path.prefilled_rows) == (8, 3)
