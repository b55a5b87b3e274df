"""Stage ``barc_tasks``: BARC jsonl rows -> ARC tasks (docs/formats.md).

Per row: skip rows with fewer than ``min_examples`` examples; draw the number of train pairs n from
the BARC weights restricted to n <= len(examples) - 1, one test pair, n + 1 distinct examples; reject
the draw if its cells add up to more than ``max_total_cells``; up to ``max_draws`` draws. Each row
draws from its own generator seeded by (seed, row index), so a task does not depend on other rows.
Malformed rows are skipped and counted (log + ``summary.json`` beside the output), never fatal.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.grids import Grid, GridError, as_grid
from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import InputFileError, write_table, write_text
from arc_pipeline.schemas import TASKS_SCHEMA

log = logging.getLogger(__name__)

# Number of train pairs -> weight, as in BARC's own data preparation (docs/formats.md).
TRAIN_PAIRS_WEIGHTS = {2: 355, 3: 1281, 4: 433, 5: 123, 6: 43, 7: 17, 8: 6, 10: 2}


class BarcTasksConfig(BaseModel):
    """How BARC rows become ARC tasks (docs/formats.md)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of the per-row draws")
    min_examples: int = Field(3, ge=2, description="rows with fewer examples are skipped")
    max_draws: int = Field(10, ge=1, description="draws per row before giving up on an oversized row")
    max_total_cells: int = Field(4500, ge=1, description="cells of all grids of a task (five 30x30 pairs)")


class MalformedRow(ValueError):
    """A row that cannot become a task; ``reason`` is the counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse_examples(row: Any) -> list[tuple[Grid, Grid]]:
    if not isinstance(row, dict) or "examples" not in row:
        raise MalformedRow("missing_examples")
    examples = row["examples"]
    if not isinstance(examples, list):
        raise MalformedRow("missing_examples", "examples is not a list")
    pairs = []
    for index, example in enumerate(examples):
        if not isinstance(example, list) or len(example) != 2:
            raise MalformedRow("ragged_examples", f"example {index} is not an [input, output] pair")
        try:
            pairs.append((as_grid(example[0]), as_grid(example[1])))
        except GridError as error:
            message = str(error)
            reason = (
                "values_out_of_range"
                if "0..9" in message or "integers" in message
                else "grid_too_large"
                if "exceeds" in message
                else "ragged_examples"
            )
            raise MalformedRow(reason, f"example {index}: {message}") from None
    return pairs


def draw_task(
    pairs: list[tuple[Grid, Grid]], rng: np.random.Generator, config: BarcTasksConfig
) -> list[tuple[Grid, Grid]] | None:
    """Choose n + 1 distinct examples (the last one is the test pair), or None if all draws are too big."""
    allowed = {n: w for n, w in TRAIN_PAIRS_WEIGHTS.items() if n <= len(pairs) - 1}
    counts = np.array(list(allowed), dtype=int)
    weights = np.array(list(allowed.values()), dtype=float)
    for _ in range(config.max_draws):
        n_train = int(rng.choice(counts, p=weights / weights.sum()))
        chosen = rng.choice(len(pairs), size=n_train + 1, replace=False)
        selection = [pairs[i] for i in chosen]
        if sum(i.size + o.size for i, o in selection) <= config.max_total_cells:
            return selection
    return None


def row_to_task(row_index: int, row: Any, config: BarcTasksConfig) -> Task:
    pairs = parse_examples(row)
    if len(pairs) < config.min_examples:
        raise MalformedRow("too_few_examples", f"{len(pairs)} examples")
    rng = np.random.default_rng([config.seed, row_index])
    selection = draw_task(pairs, rng, config)
    if selection is None:
        raise MalformedRow("too_many_cells", f"no draw within {config.max_total_cells} cells")
    train = tuple(Pair(i, o) for i, o in selection[:-1])
    test = (Pair(*selection[-1]),)
    return Task(task_id=f"barc_{row_index:06d}", train=train, test=test, source="barc")


def read_rows(path: Path) -> Iterator[tuple[int, Any | None, str | None]]:
    """Yield (row index, parsed row or None, JSON error or None) for each line of the jsonl."""
    with path.open() as handle:
        for row_index, line in enumerate(handle):
            try:
                yield row_index, json.loads(line), None
            except json.JSONDecodeError as error:
                yield row_index, None, str(error)


def convert(jsonl: Path, output: Path, config: BarcTasksConfig) -> dict[str, Any]:
    if not jsonl.is_file():
        raise InputFileError(f"{jsonl}: BARC jsonl not found")
    tasks, skipped = [], Counter()
    for row_index, row, json_error in tqdm(read_rows(jsonl), desc="barc rows", unit="row", mininterval=2):
        try:
            if json_error is not None:
                raise MalformedRow("not_json", json_error)
            tasks.append(row_to_task(row_index, row, config).to_row())
        except MalformedRow as error:
            skipped[error.reason] += 1
            log.debug("%s line %d skipped: %s", jsonl, row_index + 1, error)
    summary = {
        "input": str(jsonl),
        "rows": len(tasks) + sum(skipped.values()),
        "tasks": len(tasks),
        "skipped": dict(sorted(skipped.items())),
    }
    if not tasks:
        raise InputFileError(f"{jsonl}: no usable rows ({summary['skipped']})")
    write_table(tasks, output, TASKS_SCHEMA)
    summary_path = output.with_name(output.stem + ".summary.json")
    write_text(json.dumps(summary, indent=2) + "\n", summary_path)
    log.info(
        "%d tasks from %d rows; skipped %s (see %s)", len(tasks), summary["rows"], summary["skipped"], summary_path
    )
    return summary


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", type=Path, required=True, help="BARC jsonl")
    parser.add_argument("--output", type=Path, required=True, help="tasks parquet")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> None:
    convert(args.input, args.output, parse_config(args, BarcTasksConfig))
