"""Helper commands: steps the workflow's rules run between stages, with no config section of their own.

``shard`` and ``gather`` split a tasks file for parallel GPU jobs and join their predictions;
``refine-prompts`` turns the evaluation baseline's wrong answers into refinement prompts (its settings
come from the ``evaluate`` and ``inference`` sections, ``rules/evaluate.smk``). The stages themselves,
one per config section, are in :mod:`arc_pipeline.stages`.
"""
