"""The shared prompt forward's row grouping, ``prompt_groups``, against the ``torch.unique(dim=0)`` it replaced.

Every pass of the policy with ``train.share_prompt_forward`` (each chunk's, the reference's, the generation's)
first groups its rows by prompt (arc_pipeline/training/speed/shared_prompt.py). ``torch.unique`` over the rows
sorted them: 15 ms a call on an H200, 0.31 s of device time in a preset step's profile (benchmarks/README.md,
"Where the step goes"). The way it uses now compares every row with each group's first row.

Batches of ``--rows`` rows of a ``--prompt-tokens``-token prompt (the presets' 32 completions of a 2,055-token
prompt), their rows drawn from ``--groups`` distinct prompts; milliseconds per call, median of ``--repeats``, both
ways giving the same groups.

    python benchmarks/prompt_groups.py                          # the device there is (a GPU if one is visible)
    python benchmarks/prompt_groups.py --device cpu --groups 1,4,32
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from arc_pipeline.training.speed.shared_prompt import prompt_groups

log = logging.getLogger("prompt_groups")


def groups_by_sorting(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """The earlier way: ``torch.unique`` over the rows, then the groups in order of their first row."""
    keyed = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)
    _, group_of_row = torch.unique(keyed, dim=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(group_of_row.tolist()):
        groups.setdefault(group, []).append(row)
    return list(groups.values())


def batch(rows: int, prompt_tokens: int, groups: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts: ``groups`` distinct ones (lengths up to ``prompt_tokens``), rows drawn in turn."""
    generator = torch.Generator().manual_seed(0)
    distinct = torch.randint(0, 128256, (groups, prompt_tokens), generator=generator)
    lengths = prompt_tokens - torch.arange(groups) * 7
    masks = (torch.arange(prompt_tokens) >= (prompt_tokens - lengths).unsqueeze(1)).long()
    pick = torch.arange(rows) % groups
    return distinct[pick].to(device), masks[pick].to(device)


def median_ms(way, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, repeats: int) -> float:
    way(prompt_ids, prompt_mask)  # warm-up: kernels loaded, allocator primed
    times = []
    for _ in range(repeats):
        if prompt_ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        way(prompt_ids, prompt_mask)  # both ways end in .tolist(): the device's work is inside the time
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=32, help="rows of a pass (the presets: 32 completions)")
    parser.add_argument("--prompt-tokens", type=int, default=2055, help="padded prompt width (gpu_grpo.py's 2,055)")
    parser.add_argument("--groups", default="1,2,8", help="comma-separated: distinct prompts among the rows")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    lines = [
        f"device {name}, torch {torch.__version__}; {args.rows} rows of {args.prompt_tokens} prompt tokens",
        "| distinct prompts | torch.unique (ms) | prompt_groups (ms) | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for groups in (int(value) for value in args.groups.split(",")):
        prompt_ids, prompt_mask = batch(args.rows, args.prompt_tokens, groups, args.device)
        found = prompt_groups(prompt_ids, prompt_mask)
        if found != groups_by_sorting(prompt_ids, prompt_mask) or len(found) != min(groups, args.rows):
            raise SystemExit(f"the two ways group {groups} distinct prompts differently")
        sorting = median_ms(groups_by_sorting, prompt_ids, prompt_mask, args.repeats)
        comparing = median_ms(prompt_groups, prompt_ids, prompt_mask, args.repeats)
        lines.append(f"| {groups} | {sorting:.3f} | {comparing:.3f} | {comparing / sorting:.2f}x |")
    log.info("\n".join(lines))


if __name__ == "__main__":
    main()
