"""Running model-generated programs safely and fast (see docs/sandbox.md)."""

from arc_pipeline.sandbox.program import extract_code, prepare_code
from arc_pipeline.sandbox.sandbox import Sandbox
from arc_pipeline.sandbox.types import ProgramResult, SandboxConfig

__all__ = ["ProgramResult", "Sandbox", "SandboxConfig", "extract_code", "prepare_code"]
