"""Crash-safe file writes and careful reads that every part of r2s2r may use.

Writes: a reader sees the old content or the new one, never a mix; a crash leaves at most a hidden
temporary beside the target (the next write removes it), and a write that fails (a full disk) leaves
nothing behind and raises `DiskFullError`. Reads: a truncated or corrupt JSON or safetensors file raises
`DamagedFileError` naming the file and the fix, not the parser's message.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from r2s2r.errors import DamagedFileError, DiskFullError


def is_disk_full(error: BaseException, path: str | Path | None = None) -> bool:
    """Whether `error`, or an error it was raised from, says the disk is full (ENOSPC); with `path`, also
    whether the disk holding `path` has less than 1 MiB left (LeRobot's image writer, say, prints the ENOSPC
    of a frame it could not write and fails later, on reading that frame back). False for a
    `DiskFullError`, which already says so."""
    seen = error
    for _ in range(8):  # the chain of causes, not forever
        if isinstance(seen, DiskFullError):
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            break
    if path is None:
        return False
    existing = next((p for p in (Path(path), *Path(path).absolute().parents) if p.exists()), Path("/"))
    return shutil.disk_usage(existing).free < 2**20


def disk_full(path: str | Path) -> DiskFullError:
    """The one-line error for a write to `path` that failed on a full disk and was cleaned up."""
    return DiskFullError(
        f"the disk is full: writing {path} failed (nothing half-written was kept); free space or write "
        "elsewhere, then re-run."
    )


@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """A hidden temporary beside `path` to write into; when the block ends it takes the place of `path`,
    and when the block fails it is removed (a full disk raises `DiskFullError`)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path) from e
        raise
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new content, never a mix."""
    with staged_file(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def append_text(path: str | Path, text: str) -> None:
    """Append `text` to `path` in one flushed write; if the write fails (a full disk), the file is cut back
    to what it held before, so it never ends in a partial line."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        data = memoryview(text.encode())
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, size)
            if is_disk_full(e):
                raise disk_full(path) from e
            raise
    finally:
        os.close(fd)


def replace_directory(tmp: Path, directory: Path) -> Path:
    """Put the fully written folder `tmp` in the place of `directory`, which may exist: readers see the old
    folder or the new one, and a crash leaves at most a stale `.<name>.old` beside it."""
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old)
    else:
        os.replace(tmp, directory)
    return directory


@contextmanager
def staged_directory(directory: str | Path) -> Iterator[Path]:
    """A fresh hidden folder beside `directory` to write into; when the block ends it takes the place of
    `directory` (`replace_directory`), and when the block fails it is removed (a full disk raises
    `DiskFullError`)."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        replace_directory(tmp, directory)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e):
            raise disk_full(directory) from e
        raise


def read_json(path: str | Path, fix: str) -> Any:
    """The JSON value in `path`; a file that is not JSON raises `DamagedFileError` naming it and `fix`."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        reason = f"{e.msg} at line {e.lineno} column {e.colno}"
    except UnicodeDecodeError:
        reason = "it is binary"
    raise DamagedFileError(f"{path} is not valid JSON ({reason}); {fix}")


def load_safetensors(path: str | Path, fix: str, device: str = "cpu") -> dict:
    """The tensors in the safetensors file `path`; a truncated or corrupt file raises `DamagedFileError`
    naming it and `fix`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device=device)
    except SafetensorError as e:
        raise DamagedFileError(f"{path} is truncated or corrupt ({e}); {fix}") from None
