"""One gloo rank of the data-parallel chunked-backward checks (test_chunked_backward.py): a small model wrapped in
DistributedDataParallel, a bnpo-style loss, the micro-batch's gradient with and without chunks, written to a file.
The second check runs a tiny Llama whose completions share their prompt's pass (shared_prompt.py): the chunks
then share one prompt pass, and its gradient must reach the all-reduce too."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist

from arc_pipeline.training.speed.chunked_backward import ChunkedBackward
from arc_pipeline.training.speed.prompt_attention import bottom_right_attention_holds, use_shared_prompt_attention
from arc_pipeline.training.speed.shared_prompt import SharedPromptForward

ROWS, PROMPT, COMPLETION, VOCABULARY = 4, 3, 6, 20


def gather(tensor: torch.Tensor) -> torch.Tensor:
    """accelerate's gather: every process's tensor, concatenated (equal shapes required, as in NCCL)."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.cat(parts)


def bnpo_loss(model, inputs, *args, **kwargs):
    """A loss of TRL's bnpo shape: per-token terms of the completion, summed over the mask, over its tokens;
    like TRL's, it gathers a per-completion metric from all processes."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    values = model(ids).squeeze(-1)[:, -inputs["completion_ids"].shape[1] :]
    mask = inputs["completion_mask"]
    per_token = values * inputs["advantages"].unsqueeze(1)
    gather((per_token.detach() * mask).sum(dim=1))
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


#: completion lengths per rank: alone, rank 0 would run chunks of two completions and rank 1 of one
LENGTHS = {0: [2, 1, 3, 2], 1: [6, 1, 5, 2]}
BUDGET = 2 * (PROMPT + 3)


def micro_batch(rank: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(rank)
    mask = torch.zeros(ROWS, COMPLETION)
    for row, length in enumerate(LENGTHS[rank]):
        mask[row, :length] = 1
    return {
        "prompt_ids": torch.randint(0, VOCABULARY, (ROWS, PROMPT), generator=generator),
        "completion_ids": torch.randint(0, VOCABULARY, (ROWS, COMPLETION), generator=generator),
        "completion_mask": mask,
        "advantages": torch.randn(ROWS, generator=generator),
    }


def gradient(model, compute_loss, inputs) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    compute_loss(model, inputs).backward()  # DDP all-reduces here
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@contextlib.contextmanager
def process_group(rank: int, world: int, port: int) -> Iterator[None]:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        yield
    finally:
        dist.destroy_process_group()


def run_rank(rank: int, world: int, port: int, out: str) -> None:
    with process_group(rank, world, port):
        torch.manual_seed(0)  # the same initial weights on every rank
        net = torch.nn.Sequential(torch.nn.Embedding(VOCABULARY, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        model = torch.nn.parallel.DistributedDataParallel(net)
        model.train()
        inputs = micro_batch(rank)
        whole = gradient(model, bnpo_loss, inputs)
        trainer = SimpleNamespace(
            loss_type="bnpo",
            compute_loss=bnpo_loss,
            # as accelerate's Accelerator does for DDP
            accelerator=SimpleNamespace(
                num_processes=world, device="cpu", gather=gather, no_sync=lambda m: m.no_sync()
            ),
        )
        ChunkedBackward(BUDGET).attach(trainer)
        chunked = gradient(model, trainer.compute_loss, inputs)
        torch.save({"whole": whole, "chunked": chunked}, f"{out}/rank{rank}.pt")


#: the tiny Llama's micro-batch: every row answers its rank's one prompt (rank 1's left padded)
PROMPT_WIDTH, PADDING = 5, {0: 0, 1: 2}
SHARED_BUDGET = 2 * (3 + 1)  # rows x (completion + the prompt's last token): rank 0 alone would take 2 rows


def tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)  # the same initial weights on every rank
    config = LlamaConfig(
        vocab_size=20,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as TRL's GRPOTrainer does
    return model


def shared_micro_batch(rank: int) -> dict[str, torch.Tensor]:
    batch = micro_batch(rank)
    generator = torch.Generator().manual_seed(10 + rank)
    prompt = torch.randint(1, 20, (PROMPT_WIDTH,), generator=generator)
    prompt_mask = torch.ones(PROMPT_WIDTH, dtype=torch.long)
    prompt[: PADDING[rank]], prompt_mask[: PADDING[rank]] = 0, 0
    batch["prompt_ids"] = prompt.expand(ROWS, -1).clone()
    batch["prompt_mask"] = prompt_mask.expand(ROWS, -1).clone()
    return batch


def shared_bnpo_loss(shared: SharedPromptForward):
    """The bnpo-style loss over log-probs from the shared prompt forward, gathering a metric as TRL does."""

    def loss(model, inputs, *args, **kwargs):
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"].long()], dim=1)
        logps, _, _ = shared.logps_and_entropies(model, ids, mask, inputs["completion_ids"].shape[1])
        completion_mask = inputs["completion_mask"]
        per_token = logps * inputs["advantages"].unsqueeze(1)
        gather((per_token.detach() * completion_mask).sum(dim=1))
        return (per_token * completion_mask).sum() / completion_mask.sum().clamp(min=1.0)

    return loss


def not_trls(*args, **kwargs):
    raise AssertionError("every row of the micro-batch should take the shared path")


def run_rank_shared(rank: int, world: int, port: int, out: str) -> None:
    with process_group(rank, world, port):
        model = torch.nn.parallel.DistributedDataParallel(tiny_llama())
        model.train()
        inputs = shared_micro_batch(rank)
        accelerator = SimpleNamespace(
            num_processes=world,
            device="cpu",
            gather=gather,
            no_sync=lambda m: m.no_sync(),
            autocast=contextlib.nullcontext,
        )
        shared = SharedPromptForward()
        shared.trainer, shared._original = SimpleNamespace(accelerator=accelerator), not_trls
        shared._bottom_right = bottom_right_attention_holds(torch.device("cpu"), torch.float32, 4, 2)
        use_shared_prompt_attention()
        whole = gradient(model, shared_bnpo_loss(shared), inputs)
        trainer = SimpleNamespace(loss_type="bnpo", compute_loss=shared_bnpo_loss(shared), accelerator=accelerator)
        ChunkedBackward(SHARED_BUDGET, shared_prompt=shared).attach(trainer)
        prompt_passes = []
        run_prompt = shared._run_prompt
        shared._run_prompt = lambda *args: prompt_passes.append(1) or run_prompt(*args)
        chunked = gradient(model, trainer.compute_loss, inputs)
        torch.save({"whole": whole, "chunked": chunked, "prompt_passes": len(prompt_passes)}, f"{out}/rank{rank}.pt")
