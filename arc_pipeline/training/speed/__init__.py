"""The step-speed machinery of GRPO: the same step, computed with less work.

Each module replaces one part of TRL's step by an equivalent cheaper one, switched by a ``train`` setting and
checked against TRL's own computation by its test: shared_prompt.py (one forward of the prompt shared by the
group's completions, with prompt_attention.py's masks), chunked_backward.py (the backward in chunks of
completions), correction.py (the vLLM importance-sampling ratio from the loss's own forward). compiled_layers.py
compiles the decoder layers instead (the same passes by other kernels); settings.py checks that the levers agree.

May import: torch, transformers, TRL and each other; never the GRPO stage (arc_pipeline.training's own modules),
``processes`` or ``sft``.
"""
