"""Which prompts an overlapped generation request asks for (arc_pipeline/training/processes/overlap.py): the epoch's
generation batches ahead of those the trainer has taken, and the distinct prompts of a server request."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any


def request_prompts(every_rank: list[list[list[list[int]]]], num_generations: int) -> list[list[int]]:
    """The distinct prompts one request asks for, ``every_rank[rank][block]`` being a rank's prompt rows of a step:
    block by block, the rows of all ranks in rank order (TRL's global batch), one prompt per group of
    ``num_generations`` consecutive rows. A group split over the ranks (2 ranks training 16 rows each of a group
    of 32) is asked for once, as TRL's own server-mode generate asks; :meth:`OverlappedGeneration._keep` then gives
    each rank its rows of the group's completions. Asking once per rank instead doubled the server's work and
    shifted every later block's completions onto the wrong step."""
    prompts: list[list[int]] = []
    for block in range(len(every_rank[0])):
        rows = [prompt for rank_blocks in every_rank for prompt in rank_blocks[block]]
        if len(rows) % num_generations:
            raise ValueError(
                f"overlap_generation: a step of {len(rows)} prompt rows is not whole groups of "
                f"num_generations {num_generations}"
            )
        prompts.extend(rows[::num_generations])
    return prompts


class Lookahead:
    """An epoch iterator that can show the batches after those it has given out."""

    def __init__(self, iterator: Iterator[Any]) -> None:
        self.iterator = iterator
        self.buffer: deque[Any] = deque()
        self.given = 0

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Any:
        batch = self.buffer.popleft() if self.buffer else next(self.iterator)
        self.given += 1
        return batch

    def peek(self, offset: int) -> Any | None:
        """The batch ``offset`` places after the last one given out, or None past the epoch's end."""
        while len(self.buffer) <= offset:
            try:
                self.buffer.append(next(self.iterator))
            except StopIteration:
                return None
        return self.buffer[offset]
