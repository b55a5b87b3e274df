"""The shared prompt forward (train.share_prompt_forward) gives TRL's own log-probs, entropies and gradients.

TRL's ``_get_per_token_logps_and_entropies`` on a real GRPOTrainer (tiny random Llama with a LoRA) is the
reference; the shared one must equal it on a batch of several prompts of different lengths (left padded, as
TRL pads them) whose completions have different lengths (right padded), and it must actually run each group's
prompt once (the tokens the model embeds are counted).
"""

from __future__ import annotations

import pytest
import torch

from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.speed.shared_prompt import SharedPromptForward, left_padding, prompt_groups
from tests.numerics import assert_reordered_close, model_sum_terms, reordered_sum_tolerance
from tests.training.speed.test_chunked_backward import (
    COMPLETION_LENGTHS,
    VaryingReward,
    assert_same_adapter,
    config,
    loss_and_gradient,
    micro_batch_terms,
    trainer_and_micro_batch,
    two_step_adapter,
)
from tests.training.training_helpers import grpo_trainer

pytestmark = pytest.mark.slow

# (prompt length, completion lengths of its rows); rows of the prompts interleaved in the batch
PROMPTS = [(7, [5, 2, 6]), (4, [6, 1]), (9, [3])]
WIDTH, COMPLETION = 9, 6


def mixed_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``: prompts left padded to WIDTH, completions right padded to COMPLETION,
    rows ordered 0, 1, 2, 0, 1, 0 by prompt."""
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (length,), generator=generator) for length, _ in PROMPTS]
    order = [0, 1, 2, 0, 1, 0]
    left = {index: list(lengths) for index, (_, lengths) in enumerate(PROMPTS)}
    ids, masks = [], []
    for index in order:
        prompt = prompts[index]
        length = left[index].pop(0)
        completion = torch.randint(3, vocab, (COMPLETION,), generator=generator)
        padding = WIDTH - prompt.shape[0]
        ids.append(torch.cat([torch.zeros(padding, dtype=torch.long), prompt, completion]))
        masks.append(
            torch.cat(
                [
                    torch.zeros(padding),
                    torch.ones(prompt.shape[0]),
                    torch.ones(length),
                    torch.zeros(COMPLETION - length),
                ]
            )
        )
    return torch.stack(ids), torch.stack(masks).long()


def embedded_tokens(model) -> list[int]:
    """A list that grows by the tokens of every forward pass through the model's input embeddings."""
    counted: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, out: counted.append(args[0].numel()))
    return counted


def assert_same_outputs(ours, theirs, model, input_ids) -> None:
    """Log-probs, entropies and LoRA gradient of logps_entropies_gradient equal up to float32 summation order."""
    terms = model_sum_terms(model.config, input_ids.numel())
    for name, mine, reference in zip(("log-probs", "entropies", "LoRA gradient"), ours, theirs, strict=True):
        assert_reordered_close(mine, reference, terms, name)


def logps_entropies_gradient(trainer, input_ids, attention_mask, **kwargs):
    model = trainer.model
    model.zero_grad(set_to_none=True)
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
        model, input_ids, attention_mask, COMPLETION, compute_entropy=True, **kwargs
    )
    mask = attention_mask[:, -COMPLETION:]
    # a loss that weighs every position differently, through log-probs and entropies
    weights = torch.linspace(-1.0, 1.0, mask.numel()).reshape(mask.shape)
    ((logps * weights * mask).sum() + 0.1 * (entropies * mask).sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad and p.grad is not None])
    return (logps * mask).detach(), (entropies * mask).detach(), grads


@pytest.mark.parametrize(("checkpointed", "rows_alone_shared"), [(False, True), (True, True), (False, False)])
@pytest.mark.parametrize("hole", [False, True])
def test_shared_prompts_give_trls_logps_entropies_and_gradient(
    checkpointed, rows_alone_shared, hole, tiny_model, refinement_dataset, tmp_path, monkeypatch
):
    """Right-padded completions take the bottom-right causal attention; a completion mask with a hole in it
    (not TRL's layout) keeps the explicit mask; both give TRL's numbers. A prompt of one row takes the shared
    path where TRL's fused head scores every position (a CPU, this test's device), TRL's own on a GPU (the
    attribute set as there)."""
    import arc_pipeline.training.speed.prompt_attention as prompt_attention

    train_config = config(gradient_checkpointing=checkpointed, temperature=0.7)
    trainer, _ = trainer_and_micro_batch(train_config, tiny_model, refinement_dataset(2), tmp_path)
    input_ids, attention_mask = mixed_batch(trainer.model.config.vocab_size)
    if hole:
        attention_mask[0, WIDTH + 2] = 0  # a prompt of several rows: its group cannot take the causal mask alone
    counted = embedded_tokens(trainer.model)
    reference = logps_entropies_gradient(trainer, input_ids, attention_mask)
    assert sum(counted) == input_ids.numel()  # TRL: every row whole, padding included
    assert reference[2].abs().sum() > 0

    sharing = SharedPromptForward().attach(trainer)
    assert sharing._rows_alone_shared  # on this CPU
    sharing._rows_alone_shared = rows_alone_shared
    bottom_right = []
    attention = prompt_attention.bottom_right_causal_attention
    monkeypatch.setattr(
        prompt_attention, "bottom_right_causal_attention", lambda *args: bottom_right.append(1) or attention(*args)
    )
    counted.clear()
    shared = logps_entropies_gradient(trainer, input_ids, attention_mask)
    # every layer of each group's pass over completions, replayed once more under checkpointing
    shared_prompts = [(length, rows) for length, rows in PROMPTS if len(rows) > 1 or rows_alone_shared]
    layers = trainer.model.config.num_hidden_layers
    assert len(bottom_right) == (len(shared_prompts) - hole) * layers * (1 + checkpointed)

    # each shared prompt once (less its last token), then its rows from the prompt's last token on; a prompt of
    # one row that is not shared goes to TRL's computation whole
    prompt_passes = [length - 1 for length, _ in shared_prompts]
    completion_passes = [len(rows) * (1 + COMPLETION) for _, rows in shared_prompts]
    alone = [len(rows) * (WIDTH + COMPLETION) for _, rows in PROMPTS if len(rows) == 1 and not rows_alone_shared]
    # (checkpointing replays decoder layers, not the embeddings: the count is the same with it)
    assert sorted(counted) == sorted([*prompt_passes, *completion_passes, *alone])
    assert_same_outputs(shared, reference, trainer.model, input_ids)
    # the layers' own setting is back after the passes
    assert all("_can_checkpoint_with_cache" not in vars(m) for m in trainer.model.modules())


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("chunks", [None, "pairs"])
def test_micro_batch_loss_gradient_and_reference_are_trls(
    checkpointed, chunks, tiny_model, refinement_dataset, tmp_path
):
    """A real micro-batch (8 completions of one prompt): the reference log-probs TRL computes while scoring, then
    the loss and LoRA gradient of compute_loss, with and without the chunked backward on top."""
    from arc_pipeline.training.speed.chunked_backward import ChunkedBackward

    train_config = config(loss_type="bnpo", gradient_checkpointing=checkpointed)
    trainer, batch = trainer_and_micro_batch(train_config, tiny_model, refinement_dataset(2), tmp_path)
    reference_loss, reference_grad = loss_and_gradient(trainer, batch)

    shared = SharedPromptForward().attach(trainer)
    calls = []
    group = shared._group
    shared._group = lambda *args: calls.append(args[1].shape[0]) or group(*args)
    if chunks:
        # two completions of at most 8 tokens per chunk, each from the prompt's last token on
        ChunkedBackward(2 * (8 + 1), shared_prompt=shared).attach(trainer)
    counted = embedded_tokens(trainer.model)
    loss, grad = loss_and_gradient(trainer, batch)
    # all 8 rows through the shared path: one group, or one per chunk of two
    assert calls == ([2, 2, 2, 2] if chunks else [8])
    # the prompt (less its last token) runs once for the whole micro-batch, chunks or not; each pass over
    # completions starts at the prompt's last token and is trimmed to its longest completion
    width = batch["completion_ids"].shape[1]
    pairs = [COMPLETION_LENGTHS[i : i + 2] for i in range(0, 8, 2)]
    completion_passes = [2 * (max(pair) + 1) for pair in pairs] if chunks else [8 * (width + 1)]
    assert sorted(counted) == sorted([int(batch["prompt_mask"][0].sum()) - 1, *completion_passes])
    terms = micro_batch_terms(trainer, batch)
    # the loss averages per-token terms of the order of one (unit-scaled advantages times ratios near one)
    tolerance = reordered_sum_tolerance(terms)
    assert loss == pytest.approx(reference_loss, rel=tolerance, abs=tolerance)
    assert_reordered_close(grad, reference_grad, terms, "LoRA gradient")


def test_an_attention_kernel_that_does_not_hold_leaves_the_explicit_mask(
    tiny_model, refinement_dataset, tmp_path, monkeypatch, caplog
):
    """The bottom-right causal attention is checked against an explicit mask when the forward is attached; a
    kernel that computed something else (here: the mask aligned top left) is not used, and the numbers stay TRL's."""
    import arc_pipeline.training.speed.prompt_attention as prompt_attention

    assert prompt_attention.bottom_right_attention_holds(torch.device("cpu"), torch.float32, 8, 2)
    trainer, _ = trainer_and_micro_batch(config(), tiny_model, refinement_dataset(2), tmp_path)
    input_ids, attention_mask = mixed_batch(trainer.model.config.vocab_size)
    reference = logps_entropies_gradient(trainer, input_ids, attention_mask)

    def top_left(module, query, key, value, dropout, scaling):
        key, value = (states.repeat_interleave(module.num_key_value_groups, dim=1) for states in (key, value))
        mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool).tril()
        output = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
        return output.transpose(1, 2).contiguous()

    monkeypatch.setattr(prompt_attention, "bottom_right_causal_attention", top_left)
    assert not prompt_attention.bottom_right_attention_holds(torch.device("cpu"), torch.float32, 8, 2)
    with caplog.at_level("WARNING"):
        forward = SharedPromptForward().attach(trainer)
    assert not forward._bottom_right
    assert "keep the explicit mask" in caplog.text
    shared = logps_entropies_gradient(trainer, input_ids, attention_mask)
    assert_same_outputs(shared, reference, trainer.model, input_ids)


def test_reference_log_probs_while_scoring_are_trls(tiny_model, refinement_dataset, tmp_path):
    """beta > 0: the reference model's log-probs (LoRA disabled) of a generation batch, shared against TRL's."""
    dataset_path = refinement_dataset(2)
    batches = []
    for share in (False, True):
        torch.manual_seed(0)
        trainer, dataset = grpo_trainer(config(), tiny_model, dataset_path, tmp_path / f"run{share}", VaryingReward())
        if share:
            SharedPromptForward().attach(trainer)
        rows = [dataset[i] for i in list(iter(trainer._get_train_sampler()))[: trainer.args.generation_batch_size]]
        batches.append(trainer._generate_and_score_completions(rows))
    whole, shared = batches
    assert torch.equal(whole["completion_ids"], shared["completion_ids"])
    mask = whole["completion_mask"]
    terms = model_sum_terms(trainer.model.config, whole["prompt_ids"].numel() + whole["completion_ids"].numel())
    assert_reordered_close(
        shared["ref_per_token_logps"] * mask, whole["ref_per_token_logps"] * mask, terms, "reference log-probs"
    )


def test_prompt_groups_and_padding():
    ids = torch.tensor([[0, 5, 6], [7, 5, 6], [0, 5, 6], [9, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]])
    # the first and fourth rows differ only under padding: the same prompt
    assert prompt_groups(ids, mask) == [[0, 2, 3], [1]]
    # random batches: the groups of equal (masked ids, mask) rows, in order of first row
    generator = torch.Generator().manual_seed(0)
    for rows in (1, 5, 32):
        prompts = torch.randint(0, 3, (3, 6), generator=generator)
        masks = (torch.arange(6) >= torch.randint(0, 3, (3, 1), generator=generator)).long()
        pick = torch.randint(0, 3, (rows,), generator=generator)
        keys = [tuple((prompts[p] * masks[p]).tolist() + masks[p].tolist()) for p in pick.tolist()]
        expected: dict[tuple, list[int]] = {}
        for row, key in enumerate(keys):
            expected.setdefault(key, []).append(row)
        assert prompt_groups(prompts[pick], masks[pick]) == list(expected.values())
    assert left_padding(mask[0]) == 1
    assert left_padding(mask[1]) == 0
    assert left_padding(torch.tensor([1, 0, 1])) is None


def test_train_with_shared_prompts_learns_what_train_without_learns(
    tiny_model, refinement_dataset, tmp_path, monkeypatch
):
    """The stage's own train(): two optimizer steps with and without sharing end at the same adapter, their
    completions sampled with each prompt prefilled once (shared_prompt_generation.py) or every row's."""
    from arc_pipeline.training.speed.shared_prompt_generation import SharedPromptGeneration

    rows_shared, prefills = [], []
    group, prefill = SharedPromptForward._group, SharedPromptGeneration._prefill
    monkeypatch.setattr(
        SharedPromptForward, "_group", lambda self, *args: rows_shared.append(args[1].shape[0]) or group(self, *args)
    )
    monkeypatch.setattr(
        SharedPromptGeneration, "_prefill", staticmethod(lambda *args: prefills.append(len(args[1])) or prefill(*args))
    )

    dataset = refinement_dataset(4)
    whole = two_step_adapter(tiny_model, dataset, tmp_path / "whole", share_prompt_forward=False)
    assert not rows_shared and not prefills
    shared = two_step_adapter(tiny_model, dataset, tmp_path / "shared", share_prompt_forward=True)
    assert rows_shared  # the reference log-probs and both steps' passes went through the shared path
    assert prefills and max(prefills) < 8  # each step's 8 completions from fewer prompt prefills
    assert_same_adapter(shared, whole)


def test_sharing_leaves_the_run_fingerprint_alone(tiny_model, refinement_dataset):
    from arc_pipeline.training.checkpoints import run_fingerprint

    dataset = refinement_dataset(2)
    assert run_fingerprint(config(share_prompt_forward=False), dataset, tiny_model) == run_fingerprint(
        config(), dataset, tiny_model
    )
    assert TrainConfig().share_prompt_forward is True
