"""What runs in the process forked for one program: confine it, run the program, write one record.

Everything here happens after fork, so the program's changes to modules, builtins or numpy die with
this process; the worker it was forked from never runs program code and never holds job data.
"""

from __future__ import annotations

import builtins
import os
import random
import sys
import types
from typing import NoReturn

import numpy as np

from arc_pipeline.domain.grids import GridError, as_grid
from arc_pipeline.sandbox import audit, protocol
from arc_pipeline.sandbox.isolation import Isolation
from arc_pipeline.sandbox.program import PRELUDE, prepare_code
from arc_pipeline.sandbox.types import INVALID_OUTPUT, MAX_MESSAGE_CHARS, MISSING_TRANSFORM, UNSAFE

READY = b"S"
_PRELUDE_CODE = compile(PRELUDE, "<prelude>", "exec")
_MEMORY_RECORD = protocol.encode_error("MemoryError", "out of memory")
_BUILTINS = dict(builtins.__dict__)


def _restore_builtins() -> None:
    """Undo a program's changes to builtins so that encoding its result works (its own process only)."""
    namespace = builtins.__dict__
    namespace.clear()
    namespace.update(_BUILTINS)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _message(error: BaseException) -> str:
    try:
        text = str(error)
    except BaseException:  # a hostile __str__
        text = "<unprintable>"
    return text[:MAX_MESSAGE_CHARS]


def _type_name(error: BaseException) -> str:
    try:
        name = type(error).__name__
    except BaseException:
        name = ""
    return name if isinstance(name, str) and name.isidentifier() and len(name) <= 64 else "Exception"


class _InvalidOutput(Exception):
    """An output that is not a grid; raised by our own validation, never by the program."""


def _validated(output: object, index: int, max_side: int) -> np.ndarray:
    try:
        return as_grid(output, max_side=max_side)
    except GridError as error:
        raise _InvalidOutput(f"output {index}: {error}") from None
    except MemoryError:
        raise
    except BaseException as error:  # a hostile __array__ or __len__
        raise _InvalidOutput(f"output {index}: {_type_name(error)}: {_message(error)}") from None


def _execute(code: str, inputs: list[np.ndarray], max_side: int = protocol.MAX_SIDE) -> bytes:
    """Run the program on every input; the record to send back.

    Each output is validated (and copied) right after its call, so a program that returns and then
    mutates one shared array cannot change an earlier output.
    """
    random.seed(0)
    np.random.seed(0)
    module = types.ModuleType("program")
    sys.modules["program"] = module  # classes and dataclasses look their module up there
    namespace = module.__dict__
    grids = []
    try:
        exec(_PRELUDE_CODE, namespace)
        exec(compile(prepare_code(code), "<program>", "exec"), namespace)
        transform = namespace.get("transform")
        if not callable(transform):
            return protocol.encode_error(MISSING_TRANSFORM, "the program defines no callable `transform`")
        for index, grid in enumerate(inputs):
            grids.append(_validated(transform(grid.copy()), index, max_side))
    except MemoryError:
        return _MEMORY_RECORD
    except _InvalidOutput as problem:
        _restore_builtins()
        return protocol.encode_error(INVALID_OUTPUT, str(problem.args[0]))
    except BaseException as error:  # the program's own exception, SystemExit included
        _restore_builtins()
        return protocol.encode_error(_type_name(error), _message(error))
    _restore_builtins()
    return protocol.encode_outputs(grids)


def _read_job(job_fd: int) -> tuple[int, str, list[np.ndarray], int]:
    body = protocol.read_frame(job_fd)
    if body is None:
        raise EOFError("the job pipe closed before a whole job arrived")
    os.close(job_fd)
    return protocol.decode_job(body)


def run(
    job_fd: int,
    record_fd: int,
    ready_fd: int,
    devnull_fd: int,
    zygote_pid: int,
    isolation: Isolation,
    use_audit_hook: bool,
    ctypes_functions: list = (),
) -> NoReturn:
    """Never returns: the process ends with os._exit whatever happens.

    The job is read only after the process has confined itself, and straight from the pipeline; the
    record goes straight back to the pipeline. The worker only learns that setup finished.
    """
    try:
        try:
            isolation.apply((job_fd, record_fd, ready_fd), devnull_fd, zygote_pid)
            if use_audit_hook:

                def report(description: str) -> None:
                    try:
                        _write_all(record_fd, protocol.encode_error(UNSAFE, f"forbidden: {description}"))
                    finally:
                        os._exit(0)

                sys.addaudithook(audit.make_hook(isolation.readable.files, isolation.readable.listings, report))
                audit.label_ctypes_calls(ctypes_functions)  # isolation no longer needs them
        except BaseException as error:
            reason = f"{type(error).__name__}: {error}".encode()[:500]
            _write_all(record_fd, protocol.SETUP_FAILED_RECORD + reason)
            os._exit(3)
        _write_all(ready_fd, READY)
        os.close(ready_fd)  # the program never gets a channel into the worker
        try:
            _, code, inputs, max_side = _read_job(job_fd)
            record = _execute(code, inputs, max_side)
        except MemoryError:
            record = _MEMORY_RECORD
        _write_all(record_fd, record)
    except MemoryError:
        try:
            _write_all(record_fd, _MEMORY_RECORD)
        except BaseException:
            pass
    except BaseException:
        pass
    finally:
        os._exit(0)
