"""A train process that samples with transformers imports TRL without vLLM
(arc_pipeline/training/processes/trl_imports.py)."""

from __future__ import annotations

import subprocess
import sys


def test_grpo_trainer_imports_without_vllm() -> None:
    probe = (
        "import sys\n"
        "from arc_pipeline.training.processes.trl_imports import import_trl_without_vllm\n"
        "assert import_trl_without_vllm()\n"
        "from trl import GRPOConfig, GRPOTrainer\n"
        "import arc_pipeline.training.grpo, arc_pipeline.training.trainer_args\n"
        "print('vllm' in sys.modules, GRPOTrainer.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["False", "GRPOTrainer"], out.stdout + out.stderr
    assert "TRL currently supports vLLM" not in out.stderr  # none of TRL's version warnings about vLLM
