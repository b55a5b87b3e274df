"""The processes of a train job: how they start, talk, stop and survive.

supervisor.py starts, watches and stops the vLLM server and the training ranks as one unit; ports.py gives each
process group its own port; weight_sync.py and overlap.py are server mode's weight sync and generation
overlapped with training (overlap_batches.py: which prompts a request asks for; overlap_requests.py: how it is
answered and cut into steps); preemption.py checkpoints on SIGTERM; settings.py checks that the layout settings
agree; trl_imports.py imports TRL without vLLM for processes that sample with transformers.

May import: the standard library, torch, transformers, TRL, and arc_pipeline's generation and error modules;
never the GRPO stage (arc_pipeline.training's own modules), ``speed`` or ``sft``. The stage's launch.py composes
these into a multi-process train job.
"""
