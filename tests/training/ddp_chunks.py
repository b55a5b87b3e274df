"""One gloo rank of the data-parallel chunked-backward check (test_chunked_backward.py): a small model wrapped in
DistributedDataParallel, a bnpo-style loss, the micro-batch's gradient with and without chunks, written to a file."""

from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist

from arc_pipeline.training.chunked_backward import ChunkedBackward

ROWS, PROMPT, COMPLETION = 4, 3, 6


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
        "prompt_ids": torch.randint(0, 20, (ROWS, PROMPT), generator=generator),
        "completion_ids": torch.randint(0, 20, (ROWS, COMPLETION), generator=generator),
        "completion_mask": mask,
        "advantages": torch.randn(ROWS, generator=generator),
    }


def gradient(model, compute_loss, inputs) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    compute_loss(model, inputs).backward()  # DDP all-reduces here
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def run_rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        net = torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
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
    finally:
        dist.destroy_process_group()
