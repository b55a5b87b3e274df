"""``train.compile_layers``: torch.compile each decoder layer of the policy, in place (regional compilation).

Compiling the whole policy (``train.torch_compile``, transformers' own) failed in Inductor on torch 2.11 at the
8B shape (benchmarks/README.md); the decoder layers are the model's repeated block, so compiling each layer's
forward gives Inductor the fusions that matter (RMSNorm, rotary embedding, SwiGLU, the LoRA branches' scale and
add) while the parts between layers, the project's chunked loss and shared prompt pass stay eager.
``nn.Module.compile`` compiles a module's call in place: the parameters keep their names, so checkpoints, the
adapter and the weight sync to vLLM see the same model. Shapes are dynamic: a step's prompt length and its last
chunk differ from the others', and a static graph per shape would recompile every step.

Not offered: each layer replayed as CUDA graphs (torch.compile's reduce-overhead mode), for a host-bound training
pass. It failed on an H200 (torch 2.13) in the step's first compiled forward, with and without the shared prompt
pass: the layers' graph replays overwrote outputs that the next layer still read (benchmarks/README.md, twelfth
and thirteenth leases).
"""

from __future__ import annotations

import logging
from typing import Any

from arc_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


def decoder_layers(model: Any) -> list[Any]:
    """The model's decoder layers (modules whose class name ends in ``DecoderLayer``), in the model's order."""
    return [module for module in model.modules() if type(module).__name__.endswith("DecoderLayer")]


def compile_decoder_layers(model: Any, backend: str = "inductor") -> int:
    """Compile every decoder layer of ``model`` in place (after the LoRA went on, so its layers are compiled
    too); the number of layers compiled. A model without decoder layers is an error, not a silent no-op.
    ``backend``: torch.compile's (the tests trace with ``aot_eager``: Inductor's CPU code is not the GPU's)."""
    layers = decoder_layers(model)
    if not layers:
        raise PipelineError(f"train: compile_layers: no decoder layer found in {type(model).__name__}")
    for layer in layers:
        layer.compile(dynamic=True, backend=backend)
    log.info("compile_layers: %d decoder layers compiled (%s)", len(layers), type(layers[0]).__name__)
    return len(layers)
