"""Crash-safe appends to a LeRobot v3 dataset.

LeRobot's writer keeps parquet writers open across episodes and rewrites `meta/info.json` after every
episode, so a process killed mid-episode leaves a dataset LeRobot cannot load. It does, however, put every
resumed recording into *new* data, video and episode-metadata files and never touches files a finalized
session wrote. That makes a commit cheap: after each finalized batch we record the list of files and the
three small mutable metadata files (info, stats, tasks) in one JSON written atomically. Restoring a commit
deletes whatever a killed batch added and puts the metadata back, so a re-run continues from the last
complete batch with no half-written episode and no duplicate.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

from r2s2r.errors import DamagedFileError
from r2s2r.files import atomic_write_text, read_json

COMMIT_FILE = "r2s2r_recording.json"
PARTIAL_SUFFIX = ".partial"  # <root>.partial: a recording's first batch, renamed to <root> once committed
_TRACKED_DIRS = ("data", "videos", "meta/episodes", "images")
_META_FILES = ("meta/info.json", "meta/stats.json", "meta/tasks.parquet")


class InterruptedRecordingError(DamagedFileError):
    """A recording killed (or failed) mid-batch: files written after its last complete batch."""


def _tracked_files(root: Path) -> list[str]:
    files = []
    for d in _TRACKED_DIRS:
        if (root / d).is_dir():
            files += [str(p.relative_to(root)) for p in sorted((root / d).rglob("*")) if p.is_file()]
    return files


def write_commit(root: Path, record: dict[str, Any]) -> None:
    """Mark the dataset's current on-disk state as complete, with `record` (config, episodes) beside it."""
    meta = {}
    for name in _META_FILES:
        if (root / name).is_file():
            meta[name] = base64.b64encode((root / name).read_bytes()).decode()
    commit = {"files": _tracked_files(root), "meta": meta, **record}
    atomic_write_text(root / COMMIT_FILE, json.dumps(commit, indent=1))


def _encoding_folders(root: Path) -> list[Path]:
    """LeRobot's temporary video-encoding folders (`tempfile.mkdtemp(dir=root)`), left by a killed batch."""
    return sorted(p for p in root.glob("tmp*") if p.is_dir())


def read_commit(root: Path) -> dict[str, Any] | None:
    path = Path(root) / COMMIT_FILE
    if not path.is_file():
        return None
    fix = f"the recording cannot be resumed safely: delete {root} and record again."
    return read_json(path, fix)


def uncommitted(root: Path, commit: dict[str, Any]) -> list[str]:
    """Files `root` holds beyond `commit`: those a later batch wrote (LeRobot writes every batch into new
    data, video and episode files), and LeRobot's encoding folders; empty for a dataset whose last batch
    completed. (Metadata edited since, e.g. a feature removed by hand, is not a killed batch.)"""
    keep = set(commit["files"])
    extra = [f for f in _tracked_files(root) if f not in keep]
    return extra + [f"{p.name}/" for p in _encoding_folders(root)]


def check_committed(root: str | Path) -> None:
    """Raise `InterruptedRecordingError` if `root` is an r2s2r recording that a kill or a failure left in
    the middle of a batch (or its first batch, `<root>.partial`); other datasets pass unchecked."""
    root = Path(root)
    first = root if root.name.endswith(PARTIAL_SUFFIX) else root.with_name(root.name + PARTIAL_SUFFIX)
    if first.is_dir() and not root.is_dir() or root == first:
        target = first.with_name(first.name.removesuffix(PARTIAL_SUFFIX))
        raise InterruptedRecordingError(
            f"the recording {target} was interrupted in its first batch (only {first} exists); re-run "
            f"r2s2r-record --root={target} with the flags that started it to record it."
        )
    commit = read_commit(root)
    if commit is None:
        return
    if extra := uncommitted(root, commit):
        raise InterruptedRecordingError(
            f"dataset {root} holds an interrupted recording ({len(extra)} file(s) written after its last "
            f"complete batch, e.g. {extra[0]}); re-run r2s2r-record --root={root} with the flags that "
            "recorded it to roll it back."
        )


def episode_labels(root: Path) -> dict[int, dict[str, Any]]:
    """Per-episode labels (ID/OOD, initial pose, success ...) of an r2s2r recording; {} for other datasets."""
    commit = read_commit(Path(root))
    return {e["episode_index"]: e for e in commit["episodes"]} if commit else {}


def restore_commit(root: Path, commit: dict[str, Any]) -> list[str]:
    """Roll the dataset back to `commit`: delete files written after it, restore its metadata.

    Returns the relative paths that were removed (empty when the dataset was already clean).
    """
    keep = set(commit["files"])
    removed = [f for f in _tracked_files(root) if f not in keep]
    for f in removed:
        (root / f).unlink()
    for d in _TRACKED_DIRS:  # drop directories the killed batch created and left empty
        base = root / d
        if base.is_dir():
            for sub in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if sub.is_dir() and not any(sub.iterdir()):
                    sub.rmdir()
    if (root / "images").is_dir() and not any((root / "images").iterdir()):
        shutil.rmtree(root / "images")
    for folder in _encoding_folders(root):
        shutil.rmtree(folder)
        removed.append(f"{folder.name}/")
    for name, blob in commit["meta"].items():
        data = base64.b64decode(blob)
        if (root / name).is_file() and (root / name).read_bytes() == data:
            continue
        tmp = root / f"{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, root / name)
        removed.append(f"{name} (restored)")
    missing = [f for f in keep if not (root / f).is_file()]
    if missing:
        raise DamagedFileError(
            f"dataset {root} lost {len(missing)} committed file(s), e.g. {missing[0]}; "
            "it cannot be repaired: delete it and record again."
        )
    return removed
