"""Server mode's weight sync releases what a vLLM without stream reuse strands (training/weight_sync.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from vllm.distributed.weight_transfer import packed_tensor

from arc_pipeline.training.processes.weight_sync import release_stranded_sync_buffers, vllm_strands_sync_buffers


def trainer(mode: str, calls: list[str]) -> SimpleNamespace:
    engine = SimpleNamespace(mode=mode, sync_weights=lambda: calls.append("sync"))
    return SimpleNamespace(vllm_generation=engine)


def test_the_sync_releases_the_cache_only_in_server_mode_with_a_vllm_that_strands_it(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("release"))
    # the installed vLLM (0.32) reuses its streams: nothing to release
    assert hasattr(packed_tensor, "_get_streams") and not vllm_strands_sync_buffers()
    assert not release_stranded_sync_buffers(trainer("server", calls))

    monkeypatch.delattr(packed_tensor, "_get_streams")  # as in vLLM 0.26
    assert vllm_strands_sync_buffers()
    for mode in ("colocate", "server"):
        job = trainer(mode, calls)
        assert release_stranded_sync_buffers(job) == (mode == "server")
        calls.clear()
        job.vllm_generation.sync_weights()
        assert calls == (["sync", "release"] if mode == "server" else ["sync"])
    assert not release_stranded_sync_buffers(SimpleNamespace())  # no vLLM engine (transformers generation)
