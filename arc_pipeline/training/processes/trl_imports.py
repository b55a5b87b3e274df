"""TRL without vLLM for a train process that samples with transformers (``use_vllm: false``: the CPU runs).

TRL's generation modules import vLLM at their own import whenever it is installed, used or not: about 3.5 s
of each train process's start on a 2-core CPU (12.4 s against 8.9 s to import ``GRPOTrainer``) and six
warning lines in every CPU train log (TRL names the CPU build's vLLM version unsupported). The train stage
tells TRL that vLLM is absent before anything imports TRL; a process that samples with vLLM (GPU runs, the
unsloth backend) imports TRL as it is.
"""

from __future__ import annotations

import importlib
import sys


def import_trl_without_vllm() -> bool:
    """Make TRL see no vLLM, if TRL's generation modules are not imported yet; whether they now import
    without it. Call only in a process that never samples with vLLM (the train stage's own process)."""
    if "trl.generation" in sys.modules:
        return "vllm" not in sys.modules
    import_utils = importlib.import_module("trl.import_utils")  # trl's lazy top module hides it as an attribute

    def vllm_absent(min_version: str | None = None) -> bool:
        return False

    import_utils.is_vllm_available = vllm_absent
    return True
