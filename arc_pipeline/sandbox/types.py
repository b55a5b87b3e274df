"""The sandbox's configuration and result types, and the error type names it records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIMEOUT = "TimeoutException"
MEMORY = "MemoryError"
UNSAFE = "UnsafeCode"
NON_DETERMINISTIC = "NonDeterministicCode"  # reserved: programs are seeded, so never produced
MISSING_TRANSFORM = "MissingTransform"
INVALID_OUTPUT = "InvalidOutput"
WORKER_CRASHED = "WorkerCrashed"
PARSING_CODE_FAILED = "ParsingCodeFailed"  # produced by callers when extract_code returns None

#: Error messages are cut to this many characters.
MAX_MESSAGE_CHARS = 300
#: Largest output side a SandboxConfig may allow: 35, the researchers' limit (``published`` rules). It
#: bounds the record a program process may write (protocol.max_record_size).
MAX_OUTPUT_SIDE_LIMIT = 35


@dataclass(frozen=True)
class SandboxConfig:
    """How programs are run.

    workers: worker processes running programs in parallel (each forks one child per program).
    timeout_s: wall-clock limit for one program over all its inputs together.
    memory_mb: address-space limit of the process running one program, in MiB.
    max_output_side: largest side of an output grid; a larger output is ``InvalidOutput``. 30 (ARC's
        limit) for the strict rules, 35 for the published ones (``scoring.rules.max_output_side``).
    """

    workers: int = 2
    timeout_s: float = 1.0
    memory_mb: int = 2048
    max_output_side: int = 30

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"SandboxConfig.workers must be >= 1, got {self.workers}")
        if not self.timeout_s > 0:
            raise ValueError(f"SandboxConfig.timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_mb < 256:
            raise ValueError(f"SandboxConfig.memory_mb must be >= 256, got {self.memory_mb}")
        if not 1 <= self.max_output_side <= MAX_OUTPUT_SIDE_LIMIT:
            raise ValueError(
                f"SandboxConfig.max_output_side must be in 1..{MAX_OUTPUT_SIDE_LIMIT}, got {self.max_output_side}"
            )


@dataclass(frozen=True)
class ProgramResult:
    """What one program did on its inputs.

    outputs: one int8 grid per input, present iff error_type is None.
    error_type: None, one of the names above, or the Python exception class name the program raised.
    error_message: short (at most MAX_MESSAGE_CHARS), or None.
    duration_s: wall-clock time of the program (from the start of its code to its last output).
    """

    outputs: list[np.ndarray] | None
    error_type: str | None
    error_message: str | None
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.error_type is None
