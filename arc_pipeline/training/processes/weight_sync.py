"""Server mode's weight sync without GPU memory that grows every step.

In server mode (docs/multi-gpu.md) TRL pushes the LoRA-merged weights to the job's vLLM server after every
optimizer step, through vLLM's packed NCCL broadcast: the weights are copied into pack buffers of about 1 GiB
(two in flight) and broadcast one buffer at a time. vLLM releases older than the fix of its issue 52950 create
two fresh CUDA streams on every call and allocate the buffers on them: 0.26, the lent GPU machines' version, does;
0.31, the cluster pin in pyproject.toml, reuses its streams. PyTorch's caching allocator keeps a freed block for the
stream that allocated it, and those streams are never used again: every sync strands the buffers' memory. At the
8B shape that is 4.4 GiB a step on the training GPU (a buffer is 1 GiB plus the tensor that overflows it, up
to the 1 GiB embedding), until the card is full.

:func:`release_stranded_sync_buffers` wraps the trainer's weight sync so that, with such a vLLM, the allocator
hands its unused cached blocks back to the device after each sync (``torch.cuda.empty_cache``); with a vLLM
that reuses its streams it changes nothing. The server's side of the broadcast is vLLM's own process, which
reserves its share of the GPU at start (``vllm_server_gpu_memory_utilization``): measured with vLLM 0.26, its
GPU stayed at 77.1 GiB over 17 steps (benchmarks/README.md, "One, two and four GPUs").
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger(__name__)


def vllm_strands_sync_buffers() -> bool:
    """Whether the installed vLLM's packed broadcast allocates its buffers on new streams at every call."""
    try:
        from vllm.distributed.weight_transfer import packed_tensor
    except ImportError:  # a vLLM without the packed weight transfer: nothing of the kind to release
        return False
    # the fixed releases keep their streams in a cached module-level function of this name
    return hasattr(packed_tensor, "packed_nccl_broadcast_producer") and not hasattr(packed_tensor, "_get_streams")


def release_stranded_sync_buffers(trainer: Any) -> bool:
    """In server mode with a vLLM that strands its pack buffers, return the allocator's unused cached memory to
    the GPU after each weight sync. Whether the trainer's sync was wrapped."""
    engine = getattr(trainer, "vllm_generation", None)
    if engine is None or getattr(engine, "mode", None) != "server" or not vllm_strands_sync_buffers():
        return False
    import torch

    sync = engine.sync_weights

    @functools.wraps(sync)
    def sync_and_release(*args: Any, **kwargs: Any) -> Any:
        try:
            return sync(*args, **kwargs)
        finally:
            torch.cuda.empty_cache()

    engine.sync_weights = sync_and_release
    log.warning(
        "this vLLM's packed weight transfer strands its buffers on new CUDA streams at every sync (vLLM issue "
        "52950): the training process releases cached GPU memory after each sync; a vLLM with the fix avoids it"
    )
    return True
