"""``train.compile_layers``: torch.compile the parts of each decoder layer of the policy, in place (regional
compilation).

Compiling the whole policy (``train.torch_compile``, transformers' own) failed in Inductor on torch 2.11 at the
8B shape (benchmarks/README.md); the decoder layers are the model's repeated block, so compiling their norms, MLP
and attention projections gives Inductor the fusions that matter (RMSNorm, SwiGLU, the LoRA branches' scale and
add) while the attention itself, the parts between layers, the project's chunked loss and shared prompt pass stay
eager. Why not each layer whole: ``compiled_regions``.
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


REGION_GRAPH_LIMIT = 32  # graphs Dynamo keeps for one compiled function (see compile_decoder_layers)


def compiled_regions(layer: Any) -> list[Any]:
    """The parts of a decoder layer that ``compile_decoder_layers`` compiles: every child but the attention block
    (the norms and the MLP), and the attention block's own children (its projections, LoRA included).

    Not the layer whole: its attention updates the key/value cache at ``cache.layers[self.layer_idx]``, an index
    Dynamo can only specialise on, and the prompt pass's cache grows by one layer per layer. So each layer would
    get a graph of its own, and past ``torch._dynamo.config.recompile_limit`` (8) the other layers ran eager: at
    least 24 of the 8B model's 32 (tests/training/speed/test_compiled_layers.py counts the graphs). These parts hold
    no per-layer constant, so every layer runs the same few graphs."""
    attention = [child for name, child in layer.named_children() if name.endswith("attn")]
    if len(attention) != 1:
        raise PipelineError(
            f"train: compile_layers: {type(layer).__name__} has {len(attention)} attention blocks (children named "
            "*attn), not one"
        )
    return [child for child in layer.children() if child is not attention[0]] + list(attention[0].children())


def compile_decoder_layers(model: Any, backend: str = "inductor") -> int:
    """Compile the ``compiled_regions`` of every decoder layer of ``model`` in place (after the LoRA went on, so its
    layers are compiled too); the number of layers whose regions were compiled. A model without decoder layers is
    an error, not a silent no-op. ``backend``: torch.compile's (the tests trace with ``aot_eager``: Inductor's CPU
    code is not the GPU's)."""
    import torch

    layers = decoder_layers(model)
    if not layers:
        raise PipelineError(f"train: compile_layers: no decoder layer found in {type(model).__name__}")
    # One function (a LoRA projection's forward) serves modules of several weight shapes (the query and output
    # projections, the key and value ones, the MLP's), each at batch 1 (the prompt pass) and more (the chunks):
    # a graph per shape class, not per layer, but possibly more than Dynamo's default limit of 8 graphs
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, REGION_GRAPH_LIMIT)
    for layer in layers:
        for region in compiled_regions(layer):
            region.compile(dynamic=True, backend=backend)
    log.info(
        "compile_layers: the norms, MLP and attention projections of %d decoder layers compiled (%s)",
        len(layers),
        type(layers[0]).__name__,
    )
    return len(layers)
