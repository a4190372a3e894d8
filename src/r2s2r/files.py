"""Crash-safe file writes that every part of r2s2r may use: a reader sees the old content or the new one,
never a mix, and a crash leaves at most a hidden temporary beside the target."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new content, never a mix."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
