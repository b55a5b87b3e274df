"""One folder for the compile caches of every GPU job of a run (``arc-pipeline --compile-cache DIR``).

A vLLM engine start compiles the model with torch.compile (Inductor, Triton kernels) and captures CUDA graphs:
50-85 s cold, under 20 s when the caches hold the result. By default those caches live in the home folder
and ``/tmp`` of whichever node runs the job, so each job of a cluster run starts cold. The workflow points
every inference and train job at one folder (``cluster.compile_cache_dir``, by default under the results),
which jobs on other nodes reuse when it is on a shared file system. Variables the user already set win.
"""

from __future__ import annotations

import os
from pathlib import Path

# environment variable -> sub-folder of the cache folder
CACHE_VARIABLES = {
    "VLLM_CACHE_ROOT": "vllm",  # vLLM's torch.compile artefacts (and its other caches)
    "TORCHINDUCTOR_CACHE_DIR": "inductor",  # Inductor's FX graph and kernel caches
    "TRITON_CACHE_DIR": "triton",  # compiled Triton kernels
}


def use_compile_cache(folder: str | os.PathLike) -> dict[str, str]:
    """Set the cache variables to sub-folders of ``folder`` (unless already set); return what was set."""
    root = Path(folder).absolute()
    chosen = {}
    for variable, sub_folder in CACHE_VARIABLES.items():
        if os.environ.get(variable):
            continue
        path = root / sub_folder
        path.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = chosen[variable] = str(path)
    return chosen
