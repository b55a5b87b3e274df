"""Training: the GRPO stage (``arc-pipeline train``) and the SFT stage (``arc-pipeline sft``).

The GRPO stage itself lives at this level: its settings (config.py, trainer_args.py), the trainer it builds
(grpo.py), its reward (rewards.py, completion_stats.py), online multi-turn episodes (online.py), the base model
and LoRA (base_model.py), checkpoints and resuming (checkpoints.py), logged metrics (callbacks.py, phases.py),
and the multi-process train job it starts when there are several processes (launch.py).

Three groups below it, each with one job:

- ``speed/``: making one GRPO step cheaper without changing what it computes (the shared-prompt forward, the
  chunked backward, the importance-sampling correction from the loss's own forward);
- ``processes/``: the processes of a train job and their lifecycle (the supervisor of the server and ranks,
  ports, server-mode weight sync and overlapped generation, checkpoint on SIGTERM, the process settings'
  checks, importing TRL without vLLM);
- ``sft/``: the SFT stage, which reuses the GRPO stage's model, LoRA, checkpoint and metric helpers.

Direction of imports (tests/test_architecture.py): the stage imports ``speed`` and ``processes``; neither of
those imports the stage or ``sft``, and ``speed`` and ``processes`` do not import each other.
"""
