"""Written-down pyarrow schemas of every parquet file the pipeline writes.

Conventions: a grid is ``list<list<int8>>`` (rows of cells), a list of grids is ``list<grid>``;
augmentation parameters are the columns ``hflip``, ``rot90_k`` and ``color_map`` (see
:mod:`arc_pipeline.domain.augmentation`); every file written by a stage is validated against its
schema before it is atomically moved into place (:func:`arc_pipeline.io.write_table`).
"""

from __future__ import annotations

import pyarrow as pa

GRID = pa.list_(pa.list_(pa.int8()))
GRIDS = pa.list_(GRID)
COLOR_MAP = pa.list_(pa.int8())  # length 10: color_map[original colour] = augmented colour

AUGMENTATION_FIELDS = [
    pa.field("hflip", pa.bool_(), nullable=False),  # flip columns first ...
    pa.field("rot90_k", pa.int8(), nullable=False),  # ... then numpy.rot90 k times (0..3)
    pa.field("color_map", COLOR_MAP, nullable=False),
]

# One row per ARC task. BARC tasks: source "barc", test_outputs known. ARC: "arc-agi-1/evaluation" etc.
TASKS_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("train_inputs", GRIDS, nullable=False),
        pa.field("train_outputs", GRIDS, nullable=False),
        pa.field("test_inputs", GRIDS, nullable=False),
        pa.field("test_outputs", GRIDS, nullable=True),  # null when the solutions are unknown
    ]
)

# One row per prediction (a model completion), first turn or refinement.
PREDICTIONS_SCHEMA = pa.schema(
    [
        pa.field("prediction_id", pa.string(), nullable=False),  # "{task_id}/t{turn}/r{round}/s{sample}"
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("turn", pa.int8(), nullable=False),  # 1 = first turn, 2 = refinement
        pa.field("round", pa.int16(), nullable=False),  # one augmentation per round
        pa.field("sample_index", pa.int16(), nullable=False),  # 0..n-1 within the round
        *AUGMENTATION_FIELDS,
        pa.field("train_order", pa.list_(pa.int16()), nullable=False),  # order of train pairs in the prompt
        pa.field("test_index", pa.int16(), nullable=False),  # test input shown in the prompt
        pa.field("parent_prediction_id", pa.string(), nullable=True),  # the refined prediction (turn 2)
        pa.field("prompt_hash", pa.string(), nullable=False),  # sha256 of the rendered prompt, 16 hex
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("completion_tokens", pa.int32(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),  # "stop" or "length" (= truncated)
        pa.field("model", pa.string(), nullable=False),
        pa.field("adapter", pa.string(), nullable=True),
        pa.field("temperature", pa.float32(), nullable=False),
        pa.field("top_p", pa.float32(), nullable=False),
        pa.field("max_tokens", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
    ]
)

# One row per executed prediction; outputs are un-augmented (comparable with the task's grids).
EXECUTIONS_SCHEMA = pa.schema(
    [
        pa.field("prediction_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("turn", pa.int8(), nullable=False),
        pa.field("has_code", pa.bool_(), nullable=False),
        pa.field("error_type", pa.string(), nullable=True),  # null = valid outputs
        pa.field("error_message", pa.string(), nullable=True),
        pa.field("train_outputs", GRIDS, nullable=True),
        pa.field("test_outputs", GRIDS, nullable=True),
        pa.field("fingerprint", pa.string(), nullable=True),
        pa.field("train_pixel_score", pa.float64(), nullable=True),
        pa.field("train_correct_grids", pa.float64(), nullable=True),
        pa.field("train_is_correct", pa.bool_(), nullable=True),
        pa.field("test_pixel_score", pa.float64(), nullable=True),  # null if solutions unknown
        pa.field("test_correct_grids", pa.float64(), nullable=True),
        pa.field("test_is_correct", pa.bool_(), nullable=True),
        pa.field("duration_s", pa.float32(), nullable=False),
    ]
)

# One row per task: the second-turn prompt built on the best wrong prediction (docs/scoring.md).
REFINEMENT_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prediction_id", pa.string(), nullable=False),  # the chosen first-turn prediction
        *AUGMENTATION_FIELDS,  # that prediction's own augmentation
        # the task, augmented with those parameters (what the model sees and the reward executes on)
        pa.field("train_inputs", GRIDS, nullable=False),
        pa.field("train_outputs", GRIDS, nullable=False),
        pa.field("test_inputs", GRIDS, nullable=False),
        pa.field("test_outputs", GRIDS, nullable=True),
        pa.field("test_index", pa.int16(), nullable=False),
        pa.field("previous_text", pa.string(), nullable=False),
        pa.field("previous_train_outputs", GRIDS, nullable=False),  # augmented, as executed
        pa.field("previous_train_correct_grids", pa.float64(), nullable=False),
        pa.field("previous_train_pixel_score", pa.float64(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),  # rendered with the chat template
        pa.field("prompt_tokens", pa.int32(), nullable=False),
    ]
)

# One row per kept second-turn completion of the SFT refiner's training set (stage sft_dataset): a
# refinement prompt (REFINEMENT_SCHEMA, as rendered) and one of the base model's own completions of it that
# solved its task, every train and test pair right, un-augmented (docs/scoring.md). TRL's prompt-completion
# format: the loss covers the completion only.
SFT_DATASET_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),  # the refinement prompt, rendered with the chat template
        pa.field("completion", pa.string(), nullable=False),  # the sampled second-turn answer, as generated
        pa.field("prediction_id", pa.string(), nullable=False),  # the sampled completion (turn 2)
        pa.field("source_prediction_id", pa.string(), nullable=False),  # the first-turn prediction it refines
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("completion_tokens", pa.int32(), nullable=False),
    ]
)

# --- scoring tables (arc_pipeline.scoring.tables; docs/scoring.md) ---------------------
# The per-task metric columns, in the published tables' order (docs/scoring.md); every value is a share in [0, 1] except
# n_preds. `solved` is the strict version of is_correct: one single prediction right on train and
# test. Test columns (and is_correct, solved) are null for tasks whose test solutions are unknown.
TASK_METRIC_COLUMNS: tuple[str, ...] = (
    "n_preds",
    "valid code",
    "valid outputs",
    "unique outputs",
    "train_pixel_score",
    "train_correct_grids",
    "train_pass_rate",
    "train_is_correct",
    "test_pixel_score",
    "test_correct_grids",
    "test_pass_rate",
    "test_is_correct",
    "is_correct",
    "solved",
)

# One row per task and nothing else (n_preds is a float, as in the means). The MEAN over the tasks is
# not stored as a row: the stage's markdown table shows it as its last row, and the evaluation's
# runs.parquet (RUNS_SCHEMA) holds each run's MEAN.
METRICS_SCHEMA = pa.schema(
    [pa.field("task_id", pa.string(), nullable=False)]
    + [
        pa.field(name, pa.float64(), nullable=name.startswith("test") or name in ("is_correct", "solved"))
        for name in TASK_METRIC_COLUMNS
    ]
)

# Error types that always get a column in the error table, whether they occur or not.
ALWAYS_ERROR_TYPES: tuple[str, ...] = ("TimeoutException", "NonDeterministicCode", "UnsafeCode", "ParsingCodeFailed")


# The closed set of error types that may name a column of an error table. A program picks the name
# of the exception it raises, so a name outside this set is counted as OTHER_ERROR_TYPE there (a
# program's output is data, never an identifier); the raw name stays in the text column error_type.
OTHER_ERROR_TYPE = "other"
KNOWN_ERROR_TYPES: tuple[str, ...] = ALWAYS_ERROR_TYPES + (
    # the sandbox's own (arc_pipeline/sandbox/types.py)
    "MemoryError",
    "MissingTransform",
    "InvalidOutput",
    "WorkerCrashed",
    # what programs usually raise: Python's built-in exceptions and numpy's
    "Exception",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "EOFError",
    "FloatingPointError",
    "ImportError",
    "IndentationError",
    "IndexError",
    "KeyError",
    "LookupError",
    "ModuleNotFoundError",
    "NameError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "RecursionError",
    "RuntimeError",
    "StopIteration",
    "SyntaxError",
    "SystemExit",
    "TabError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeError",
    "ValueError",
    "ZeroDivisionError",
    "AxisError",
    "LinAlgError",
)
ERROR_TYPE_COLUMNS: tuple[str, ...] = KNOWN_ERROR_TYPES + (OTHER_ERROR_TYPE,)


def errors_schema(error_types: list[str] | tuple[str, ...]) -> pa.Schema:
    """Per-task error table: task_id, n_preds, then the share of predictions with each error type
    (ALWAYS_ERROR_TYPES first, then the others that occur, all from ERROR_TYPE_COLUMNS); the last
    row "MEAN" averages the tasks."""
    unknown = [name for name in error_types if name not in ERROR_TYPE_COLUMNS]
    if unknown:
        raise ValueError(f"error table columns {unknown[:3]!r} are not in ERROR_TYPE_COLUMNS")
    return pa.schema(
        [pa.field("task_id", pa.string(), nullable=False), pa.field("n_preds", pa.float64(), nullable=False)]
        + [pa.field(name, pa.float64(), nullable=False) for name in error_types]
    )


# The most common errors overall: error type and the last line of its message (truncated), with
# how many predictions had it, their share of all predictions and how many tasks it touched.
COMMON_ERRORS_SCHEMA = pa.schema(
    [
        pa.field("error_type", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("share", pa.float64(), nullable=False),
        pa.field("tasks", pa.int64(), nullable=False),
    ]
)

# Long format: one row per (logged step, metric) of GRPO training, from the trainer's log history
# (TRL's metrics such as reward, completions/clipped_ratio, entropy, kl, plus the arc/* extras).
TRAINING_METRICS_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),  # optimizer step (global_step) of the logging window
        pa.field("epoch", pa.float64(), nullable=True),
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=True),  # null when the window had no value (NaN)
    ]
)

# pass@k curve of one run (arc_pipeline.scoring.passk.pass_at_k_curve): mean unbiased pass@k over
# tasks for k = 1..n.
PASS_AT_K_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("pass_at_k", pa.float64(), nullable=False),
    ]
)

# Kaggle-style score of a submission per task (arc_pipeline.scoring.submission.score_submission):
# test inputs with an exactly right attempt, and their share (the task's score).
SUBMISSION_SCORES_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("test_inputs", pa.int64(), nullable=False),
        pa.field("correct", pa.int64(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
    ]
)

# --- evaluation stage (arc_pipeline.stages.evaluate; docs/scoring.md and docs/defaults.md) ----------
# A run is a set of predictions per evaluation task: "baseline" (n_eval first-turn predictions) or
# "refine_<refiner>" (the first n_eval/2 of them plus that refiner's refinements). `run` is the
# run's id, `model` its label in the tables ("base", "base refines", "RL-refiner", ...).
RUN_LABEL_FIELDS = [
    pa.field("run", pa.string(), nullable=False),
    pa.field("initial", pa.int64(), nullable=False),  # first-turn predictions per task (the most any task has)
    pa.field("refinement", pa.int64(), nullable=False),  # refinement predictions per task (the most)
    pa.field("model", pa.string(), nullable=False),
]

# One row per run: its labels, then the MEAN over tasks of every metric (n_preds left out), then the
# refinement prompts dropped as too long for the refinement inference's context (null for the
# baseline, and when unknown).
RUNS_SCHEMA = pa.schema(
    RUN_LABEL_FIELDS
    + [pa.field(name, pa.float64(), nullable=True) for name in TASK_METRIC_COLUMNS if name != "n_preds"]
    + [pa.field("dropped prompts", pa.int64(), nullable=True)]
    # the adapter folder whose refinements the run holds (null: baseline and base refines)
    + [pa.field("adapter", pa.string(), nullable=True)]
)

# Every run's per-task metric table (METRICS_SCHEMA columns, tasks only: the MEAN rows are in runs.parquet)
# with its run id.
RUN_TASK_METRICS_SCHEMA = pa.schema([pa.field("run", pa.string(), nullable=False), *METRICS_SCHEMA])

# pass@k curve of every run: mean unbiased pass@k over tasks, k = 1..(most predictions of a task).
RUN_PASS_AT_K_SCHEMA = pa.schema(
    [pa.field("run", pa.string(), nullable=False), pa.field("model", pa.string(), nullable=False), *PASS_AT_K_SCHEMA]
)

# Kaggle-style score of every run (two attempts per test input by voting); score null when some
# task's test solutions are unknown. `best` marks the run whose submission.json was written.
RUN_KAGGLE_SCHEMA = pa.schema(
    RUN_LABEL_FIELDS
    + [
        pa.field("tasks", pa.int64(), nullable=False),
        pa.field("test_inputs", pa.int64(), nullable=False),
        pa.field("correct", pa.int64(), nullable=True),  # test inputs with an exactly right attempt
        pa.field("score", pa.float64(), nullable=True),  # mean over tasks of the share of right inputs
        pa.field("best", pa.bool_(), nullable=False),
    ]
)

# Error analysis of every run, long format: the MEAN over tasks of the share of predictions with
# each error type of ERROR_TYPE_COLUMNS that occurs (ALWAYS_ERROR_TYPES always present, zero or not).
RUN_ERRORS_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("error_type", pa.string(), nullable=False),
        pa.field("share", pa.float64(), nullable=False),
    ]
)

# --- the search in rounds (arc_pipeline.stages.search; docs/scoring.md "Search in rounds") ----------------------
# A point is what one search holds after a round: `schedule` (its predictions per round joined by "+", or
# "independent": the base model's first `predictions` baseline predictions), `refiner` (null for independent
# sampling), `round` (0 = the independent predictions it starts from), `predictions` per task spent.
SEARCH_POINT_FIELDS = [
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("refiner", pa.string(), nullable=True),
    pa.field("model", pa.string(), nullable=False),  # the table's label: "RL-refiner", "base, independent", ...
    pa.field("round", pa.int64(), nullable=False),
    pa.field("predictions", pa.int64(), nullable=False),
]
# What the point's last round added (all its predictions for a search's start; independent sampling: since the next
# smaller budget): its predictions, and the distinct output fingerprints among them that no earlier prediction of
# the task in that search gave. Per task in SEARCH_TASKS_SCHEMA, summed over tasks in SEARCH_SCHEMA.
SEARCH_ROUND_FIELDS = [
    pa.field("round_predictions", pa.int64(), nullable=False),
    pa.field("new_outputs", pa.int64(), nullable=False),
]
# Per point and evaluation task (tasks with known test solutions).
SEARCH_TASKS_SCHEMA = pa.schema(
    SEARCH_POINT_FIELDS
    + [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("is_correct", pa.float64(), nullable=True),  # 1.0: some prediction right on train, some on test
        pa.field("kaggle_score", pa.float64(), nullable=True),  # share of test inputs with a right voted attempt
        *SEARCH_ROUND_FIELDS,
    ]
)
# Per point: means over tasks, 95% paired bootstrap intervals, the gain over independent sampling at the same
# budget (null for independent sampling itself).
SEARCH_SCHEMA = pa.schema(
    SEARCH_POINT_FIELDS
    + [
        pa.field("is_correct", pa.float64(), nullable=False),
        pa.field("is_correct_low", pa.float64(), nullable=False),
        pa.field("is_correct_high", pa.float64(), nullable=False),
        pa.field("gain_over_independent", pa.float64(), nullable=True),
        pa.field("gain_low", pa.float64(), nullable=True),
        pa.field("gain_high", pa.float64(), nullable=True),
        pa.field("kaggle_score", pa.float64(), nullable=True),  # mean over tasks; null if some solution is unknown
        *SEARCH_ROUND_FIELDS,
    ]
)
