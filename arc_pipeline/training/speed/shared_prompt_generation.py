"""transformers' generate with each prompt's prefill run once for all its completions (``train.use_vllm`` off:
the CPU runs, the tests and the CPU canary).

Without vLLM, TRL samples a step's completions with the policy's own ``generate`` over a batch that repeats each
prompt ``num_generations`` times, and transformers prefills every copy: in ``config/canary.yaml`` 16 rows of
about 1,000 tokens for 4 prompts, most of a step's generation time on a CPU. Here equal rows (the same padded
prompt and mask) form groups: the groups' prompts, less their last token, run once through the policy (LoRA on);
the keys and values they leave are copied to every row of the group, and transformers' generate goes on from that
cache, starting at each row's last prompt token. Positions are those generate gives a left-padded batch, the
batch keeps its size, so sampling draws the same random numbers: the completions equal the unshared ones up to
floating-point rounding (identical on the tests' tiny models, tests/training/speed/test_shared_prompt_generation.py).

A call this does not know how to share (other inputs than ids and mask, beam search, a static cache, no repeated
prompt) goes to generate unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from arc_pipeline.training.speed.shared_prompt import prompt_groups

log = logging.getLogger(__name__)


class SharedPromptGeneration:
    """Wraps a trainer's policy's ``generate`` (TRL calls it on the unwrapped model, the same object)."""

    def __init__(self) -> None:
        self.rows = 0  # rows generated through the shared path
        self.prefilled_rows = 0  # of which prefilled: one per distinct prompt

    def attach(self, trainer: Any) -> SharedPromptGeneration:
        model = trainer.model
        generate = model.generate

        def shared_generate(*args: Any, **kwargs: Any) -> Any:
            return self.generate(model, generate, *args, **kwargs)

        model.generate = shared_generate  # an instance attribute: the class's method, and saving, stay as they are
        return self

    def generate(
        self,
        model: Any,
        generate: Any,
        *args: Any,
        input_ids: Any = None,
        attention_mask: Any = None,
        generation_config: Any = None,
        **kwargs: Any,
    ) -> Any:
        unchanged = dict(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config)
        if args or kwargs or not _shareable(input_ids, attention_mask, generation_config):
            return generate(*args, **{key: value for key, value in unchanged.items() if value is not None}, **kwargs)
        import torch

        groups = prompt_groups(input_ids, attention_mask)  # the shared log-probs' grouping (shared_prompt.py)
        if len(groups) == len(input_ids):
            return generate(**unchanged)
        first = torch.tensor([rows[0] for rows in groups], device=input_ids.device)
        inverse = torch.empty(len(input_ids), dtype=torch.long, device=input_ids.device)
        for group, rows in enumerate(groups):
            inverse[rows] = group
        cache = self._prefill(model, input_ids[first], attention_mask[first])
        cache.batch_select_indices(inverse)  # each row gets its group's keys and values
        if self.rows == 0:
            log.info("generation: %d rows share %d prompt prefills (share_prompt_forward)", len(inverse), len(first))
        self.rows += len(inverse)
        self.prefilled_rows += len(first)
        return generate(**unchanged, past_key_values=cache)

    @staticmethod
    def _prefill(model: Any, input_ids: Any, attention_mask: Any) -> Any:
        """The prompts less their last token through ``model``, at the positions generate gives a left-padded
        batch (transformers' ``_prepare_position_ids_for_generation``); their cache."""
        import torch
        from transformers import DynamicCache

        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        cache = DynamicCache(config=model.config)
        with torch.no_grad():  # as generate itself
            model(
                input_ids=input_ids[:, :-1],
                attention_mask=attention_mask[:, :-1],
                position_ids=positions[:, :-1],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,  # the prefill's logits are not used: generate computes the last token's
            )
        return cache


def _shareable(input_ids: Any, attention_mask: Any, generation_config: Any) -> bool:
    return (
        input_ids is not None
        and attention_mask is not None
        and generation_config is not None
        and input_ids.shape[1] >= 2
        and (generation_config.num_beams or 1) == 1
        and (generation_config.num_return_sequences or 1) == 1
        and generation_config.cache_implementation is None
    )
