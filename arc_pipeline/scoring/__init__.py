"""Turning executed programs into scores, tables and rewards (docs/scoring.md).

One job per module: ``similarity`` (pixel similarity), ``scores`` (per-prediction partition
scores), ``fingerprint`` (distinct outputs), ``rewards`` (RL rewards), ``execution`` (predictions ->
sandbox -> scored executions), ``resumable`` (chunked, resumable execution of big files), ``tables``
(per-task metrics, errors, run summaries, markdown), ``voting`` / ``submission`` (Kaggle attempts,
submission.json, validation and scoring) and ``passk`` (unbiased pass@k).
"""
