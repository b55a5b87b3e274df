"""Parquet reading and writing: schema-checked, atomic (no half-written outputs); folders replaced atomically.

Every page carries a CRC that readers check: a flipped bit in a data page then fails the read (naming
the file) instead of handing a consumer other numbers (docs/reliability.md). A full disk while writing
is one line naming the file; the partial file is removed.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arc_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


class InputFileError(PipelineError, RuntimeError):
    """An input file is missing or malformed; the message names the file."""


class DiskFullError(PipelineError):
    """The filesystem refused an output (full, or over quota); the message names the file."""


# what a full disk or quota looks like to a writer
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# what a damaged parquet raises (pyarrow: ArrowInvalid for bad metadata, OSError for bad pages)
_UNREADABLE = (pa.ArrowException, OSError)
_REBUILD_HINT = "delete it and rerun the workflow to rebuild it (docs/reliability.md)"


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk or quota while ``path`` is written into one :class:`DiskFullError` naming it.

    The writers below remove their temporary file before this sees the error, so nothing partial stays.
    """
    try:
        yield
    except OSError as error:
        if error.errno not in _NO_SPACE:
            raise
        folder = Path(path).parent
        try:
            free = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free there now"
        except OSError:
            free = "free space unknown"
        raise DiskFullError(
            f"{path}: no space left while writing it ({os.strerror(error.errno)}; {free}); nothing was "
            f"left half-written. Free space in {folder} (or point results_dir elsewhere) and rerun."
        ) from None


def _to_arrow(data: Any, schema: pa.Schema) -> pa.Table:
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pl.DataFrame):
        table = data.to_arrow()
    elif isinstance(data, list):
        table = pa.Table.from_pylist(data, schema=schema)
    else:
        raise TypeError(f"cannot write {type(data).__name__} as parquet")
    try:
        return table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise ValueError(f"table does not match its schema: {error}") from None


def current_umask() -> int:
    """The process's umask (read without changing it where /proc allows)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_leftovers(path: Path) -> None:
    """Delete what a killed write of ``path`` left beside it: its hidden temporary file or staging folder
    (``.<name>.<8 random characters>.tmp``) and a previous folder renamed aside (``.<name>.old-<pid>``).

    Only one job writes a given output at a time (Snakemake), so a leftover of the same name is dead."""
    leftover = re.compile(rf"\.{re.escape(path.name)}\.([a-z0-9_]{{8}}\.tmp|old-\d+)")
    if not path.parent.is_dir():
        return
    for entry in path.parent.iterdir():
        if leftover.fullmatch(entry.name):
            log.info("removing %s, left by a write of %s that did not finish", entry, path)
            _remove(entry)


def temp_beside(path: Path) -> tuple[int, str]:
    """A hidden temporary file beside ``path`` for an atomic write (fd, name), with the mode a plain
    ``open`` would give: mkstemp makes it 0600, and os.replace would keep that, so colleagues sharing
    the results folder could not read the outputs. A temporary file a killed write left is removed."""
    remove_leftovers(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd, name


def share_like_umask(root: str | os.PathLike) -> None:
    """Give every file and folder under ``root`` (itself included) the mode that the umask allows.

    Libraries that write weights (safetensors) create their files 0600 whatever the umask; on a shared
    filesystem the group could then not read a model or an adapter. Symlinks are left alone."""
    mask = current_umask()
    root = Path(root)
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


@contextmanager
def replace_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Build a folder that replaces ``target`` atomically: ``with replace_folder(out) as staging: ...``.

    The body writes into ``staging``, a hidden folder beside ``target`` (same filesystem, so the swap is a
    rename). If the body raises, ``staging`` is deleted and ``target`` is left as it was. Otherwise its
    files get the modes the umask allows (colleagues share model and adapter folders; safetensors writes
    0600), the old ``target`` (folder, file or symlink) is renamed aside, ``staging`` renamed into place and
    the old one deleted: at no moment does ``target`` hold a half-written folder.
    """
    target = Path(target)
    with writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            staging.chmod(0o777 & ~current_umask())  # mkdtemp makes it private
            yield staging
            share_like_umask(staging)
            _swap_into_place(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _swap_into_place(staging: Path, target: Path) -> None:
    if not (target.exists() or target.is_symlink()):
        os.rename(staging, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    _remove(old)  # left by a killed run that had the same process id
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_table(data: Any, path: str | os.PathLike, schema: pa.Schema) -> Path:
    """Validate ``data`` (rows, polars or arrow) against ``schema`` and write it atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = _to_arrow(data, schema)
    for field in schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"column {field.name!r} must not contain nulls (writing {path})")
    with writing(path):
        fd, tmp_name = temp_beside(path)
        os.close(fd)
        try:
            pq.write_table(table, tmp_name, compression="zstd", write_page_checksum=True)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    log.info("wrote %s (%d rows)", path, table.num_rows)
    return path


def write_text(text: str, path: str | os.PathLike) -> Path:
    """Write a text file atomically (a killed job leaves no half-written table or JSON)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = temp_beside(path)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    log.info("wrote %s", path)
    return path


def read_table(path: str | os.PathLike, schema: pa.Schema | None = None) -> pa.Table:
    """Read a parquet file; with ``schema``, check the columns are there (naming the file if not)."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except _UNREADABLE as error:
        raise InputFileError(f"{path}: not a readable parquet file ({error}); {_REBUILD_HINT}") from None
    if schema is not None:
        missing = [name for name in schema.names if name not in table.column_names]
        if missing:
            raise InputFileError(f"{path}: missing columns {missing}")
        try:
            table = table.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise InputFileError(f"{path}: columns do not match the expected schema ({error})") from None
    return table


def check_parquet(path: str | os.PathLike, schema: pa.Schema | None = None) -> Path:
    """Fail as :func:`read_table` would on a missing, unreadable or column-less file, reading only the footer:
    a stage checks an input this way before its heavy imports (torch, vLLM) that come before the real read."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    try:
        names = pq.read_schema(path).names
    except _UNREADABLE as error:
        raise InputFileError(f"{path}: not a readable parquet file ({error}); {_REBUILD_HINT}") from None
    missing = [name for name in (schema.names if schema is not None else []) if name not in names]
    if missing:
        raise InputFileError(f"{path}: missing columns {missing}")
    return path


def read_frame(path: str | os.PathLike, schema: pa.Schema | None = None) -> pl.DataFrame:
    return pl.from_arrow(read_table(path, schema))
