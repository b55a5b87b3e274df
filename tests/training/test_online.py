"""Online multi-turn rollouts (``arc_pipeline.training.online``) on the CPU with the tiny random Llama.

The tiny model's own first answers (a few tokens here) are truncated, so they always end the episode
after one turn. To see a full two-turn episode, :class:`ScriptedFirstTurn` replaces the first answer with
a fixed one (the identity program, right on one of the two train pairs of the recolor task); the
sandbox, the feedback and the second answer are real (the second sampled by the trainer's model).
"""

from __future__ import annotations

import pytest
from test_grpo import cpu_config, metric
from training_helpers import REFINE_TEXT

from arc_pipeline.domain.prompts import MATCH_MESSAGE
from arc_pipeline.io import read_frame
from arc_pipeline.schemas import TRAINING_METRICS_SCHEMA
from arc_pipeline.training.online import (
    FINAL_IDS,
    FINAL_TEXT,
    TURNS,
    FinalTurnReward,
    OnlineRollout,
)

pytestmark = pytest.mark.slow

# as BARC writes it: a newline first (the rendered first-turn prompt ends without the prefix's newline)
FIRST_ANSWER = "\n" + REFINE_TEXT


class ScriptedFirstTurn(OnlineRollout):
    """The first turn answers ``FIRST_ANSWER`` (ending with the stop token); the second is sampled."""

    def __init__(self, sandbox, stop_token_ids, answer_ids):
        super().__init__(sandbox, stop_token_ids)
        self.answer_ids = answer_ids
        self.calls = 0

    def _sample(self, trainer, prompt_ids):
        self.calls += 1
        if self.calls % 2 == 1:
            return [list(self.answer_ids) for _ in prompt_ids], None
        return super()._sample(trainer, prompt_ids)


def make_trainer(tiny_model, dataset_path, tmp_path, sandbox, rollout, config, rewards):
    from trl import GRPOTrainer

    from arc_pipeline.training.grpo import (
        grpo_arguments,
        load_model,
        load_refinement_dataset,
    )

    model, tokenizer, peft_config = load_model(config, tiny_model)
    dataset, _ = load_refinement_dataset(dataset_path, tokenizer, config)
    return GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=grpo_arguments(config, tmp_path / "ckpt", [1.0] * len(rewards)),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        rollout_func=rollout,
    )


@pytest.fixture
def sandbox():
    from arc_pipeline.sandbox import Sandbox, SandboxConfig

    with Sandbox(SandboxConfig(workers=1, timeout_s=2.0, memory_mb=1024)) as box:
        yield box


def scripted_rollout(tiny_model, sandbox, config):
    from transformers import AutoModelForCausalLM

    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.models.tokens import stop_token_ids

    tokenizer = load_tokenizer(tiny_model)
    stops = stop_token_ids(AutoModelForCausalLM.from_pretrained(str(tiny_model)), tokenizer)
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert eot in stops
    answer_ids = tokenizer(FIRST_ANSWER, add_special_tokens=False)["input_ids"] + [eot]
    return ScriptedFirstTurn(sandbox, stops, answer_ids), tokenizer, answer_ids


def test_two_turn_episode_masks_exactly_the_feedback(tiny_model, refinement_dataset, tmp_path, sandbox):
    from arc_pipeline.training.rewards import ArcReward

    config = cpu_config(max_completion_length=6, online_multi_turn=True)
    rollout, tokenizer, answer_ids = scripted_rollout(tiny_model, sandbox, config)
    reward = FinalTurnReward(ArcReward(config.reward, sandbox, rollout.stop_token_ids))
    trainer = make_trainer(tiny_model, refinement_dataset(2), tmp_path, sandbox, rollout, config, [reward])
    prompts = list(trainer.train_dataset["prompt"])
    output = rollout(prompts, trainer)

    assert len(output["completion_ids"]) == len(prompts) == len(output["env_mask"]) == len(output["prompt_ids"])
    assert output["logprobs"] is None  # transformers generation reports none; TRL recomputes them
    assert output[TURNS] == [2, 2]
    for prompt, prompt_ids, completion, mask, final_ids in zip(
        prompts, output["prompt_ids"], output["completion_ids"], output["env_mask"], output[FINAL_IDS], strict=True
    ):
        assert len(completion) == len(mask)
        n_first = len(answer_ids)
        zeros = [i for i, m in enumerate(mask) if m == 0]
        assert zeros and zeros == list(range(n_first, zeros[-1] + 1))  # one block, right after the first answer
        n_feedback = len(zeros)
        assert completion[:n_first] == answer_ids
        assert completion[n_first + n_feedback :] == final_ids
        assert 1 <= len(final_ids) <= config.max_completion_length
        # the feedback tokens continue the first turn into exactly the dataset's refinement prompt
        # (the dataset's row was built from the same previous answer and outputs)
        episode_prefix = tokenizer.decode(prompt_ids + completion[: n_first + n_feedback])
        assert episode_prefix == tokenizer.bos_token + prompt
        feedback = tokenizer.decode(completion[n_first : n_first + n_feedback])
        assert "Your first solution was not correct" in feedback and MATCH_MESSAGE in feedback
        assert "The pixel similarity score is 75.0%." in feedback
        assert "Your first solution" not in tokenizer.decode(completion[:n_first])
        assert feedback.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    # the reward scores the second answer only (a random model's second answer has no program: 0)
    rewards = reward(
        prompts,
        ["x", "y"],
        output["completion_ids"],
        train_inputs=trainer.train_dataset["train_inputs"],
        train_outputs=trainer.train_dataset["train_outputs"],
        test_inputs=trainer.train_dataset["test_inputs"],
        test_outputs=trainer.train_dataset["test_outputs"],
        **{k: output[k] for k in (FINAL_TEXT, FINAL_IDS, TURNS)},
    )
    assert rewards == [0.0, 0.0]
    # the first answer alone scores as a valid program with one train grid right (1 + 9 x 1/3)
    first = reward.reward(
        prompts,
        [FIRST_ANSWER] * 2,
        [answer_ids] * 2,
        train_inputs=trainer.train_dataset["train_inputs"],
        train_outputs=trainer.train_dataset["train_outputs"],
        test_inputs=trainer.train_dataset["test_inputs"],
        test_outputs=trainer.train_dataset["test_outputs"],
    )
    assert first == [pytest.approx(4.0)] * 2


def test_two_turn_episodes_train(tiny_model, refinement_dataset, tmp_path, sandbox):
    """One GRPO step on two-turn episodes: TRL accepts the rollout and its env_mask in the loss."""
    from test_grpo import TokenShareReward

    from arc_pipeline.training.rewards import ArcReward

    config = cpu_config(
        max_completion_length=4, online_multi_turn=True, max_steps=1, num_generations=4, gradient_accumulation_steps=2
    )
    rollout, _, _ = scripted_rollout(tiny_model, sandbox, config)
    rewards = [FinalTurnReward(ArcReward(config.reward, sandbox, rollout.stop_token_ids)), TokenShareReward(5)]
    trainer = make_trainer(tiny_model, refinement_dataset(2), tmp_path, sandbox, rollout, config, rewards)
    trainer.train()
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert logged["online/second_turn_share"] == 1.0
    # completion lengths count the model's tokens only (env_mask 1): two answers, not the feedback
    assert logged["completions/max_length"] <= len(rollout.answer_ids) + config.max_completion_length


def test_train_online_with_the_policy_first_turn(tiny_model, refinement_dataset, tmp_path):
    """grpo.train with online_multi_turn: the tiny model's truncated first answers end each episode after one turn."""
    from arc_pipeline.training.grpo import train

    config = cpu_config(online_multi_turn=True, max_steps=2, num_generations=4, gradient_accumulation_steps=2)
    metrics_path = tmp_path / "metrics.parquet"
    result = train(config, refinement_dataset(4), tiny_model, tmp_path / "adapter", metrics_path)
    assert result.global_step == 2
    metrics = read_frame(metrics_path, TRAINING_METRICS_SCHEMA)
    assert metric(metrics, "online/second_turn_share") == [0.0, 0.0]
    assert metric(metrics, "completions/max_length") == [4.0, 4.0]  # first answer only, 4 tokens
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


def test_first_turn_runs_under_the_rewards_execution_rules():
    """The first answer's execution (which decides the feedback turn) follows ``execution_rules``, like the
    reward: no trainer needed, the real sandbox configured as grpo.train configures it."""
    import numpy as np

    from arc_pipeline.domain.tasks import Pair, Task
    from arc_pipeline.sandbox import Sandbox, SandboxConfig
    from arc_pipeline.scoring.rules import max_output_side

    grid = np.array([[1, 0], [0, 0]], dtype=np.int8)
    task = Task("t", train=(Pair(grid, grid * 2), Pair(grid.T, grid.T * 2)), test=(Pair(grid, grid),), source="test")
    bodies = [
        "# a random comment\ndef transform(g):\n    return g",  # runs strict; NonDeterministicCode published
        "import numpy as np\ndef transform(g):\n    return np.ones((33, 33), dtype=int)",  # valid published only
        "def transform(g):\n    return g * 1.5",  # floats: invalid strict, cast (1.5 -> 1) published
    ]
    texts = [f"```python\n{body}\n```" for body in bodies]
    stop = 7
    ids = [[3, stop]] * len(texts)
    outcome = {}
    for rules in ("strict", "published"):
        config = SandboxConfig(workers=1, timeout_s=2.0, memory_mb=1024, max_output_side=max_output_side(rules))
        with Sandbox(config) as box:
            rollout = OnlineRollout(box, [stop], rules)
            results = rollout.first_turn_results(ids, texts, [task] * len(texts))
            outcome[rules] = {
                index: (
                    result.error_type,
                    None if result.outputs is None else result.outputs[0].shape,
                    rollout._refinable_outputs(task, result) is not None,
                )
                for index, result in results.items()
            }
            assert rollout.first_turn_results([[3, 4]], texts[:1], [task]) == {}  # unfinished: not run
    assert outcome["strict"] == {
        0: (None, (2, 2), True),
        1: ("InvalidOutput", None, False),
        2: ("InvalidOutput", None, False),
    }
    assert outcome["published"] == {1: (None, (33, 33), True), 2: (None, (2, 2), True)}
    with pytest.raises(ValueError, match="execution rules"):
        OnlineRollout(None, [stop], "lenient")
