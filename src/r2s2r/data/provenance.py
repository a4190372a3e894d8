"""Which policies generated a model's training data: the provenance a held-out evaluation checks against.

A world model directory may hold `provenance.json`, a list with one entry per dataset its weights were
fitted on, written by training and refinement and inherited from the checkpoint a refinement started from:

| key             | what                                                                          |
|-----------------|-------------------------------------------------------------------------------|
| `root`          | the dataset's folder when it was used                                         |
| `policy_path`   | the policy that recorded it (r2s2r recordings); None for other datasets       |
| `policy_kwargs` | that policy's keyword arguments                                               |
| `episodes`      | episodes in the dataset                                                       |
| `stage`         | what used it: `train` (the whole model) or `refine_head` (the state head)     |

Evaluating a model on a policy family is a held-out evaluation only if no entry's policy belongs to that
family (`generated_by`).
"""

from __future__ import annotations

import json
from pathlib import Path

from r2s2r.data.commit import read_commit
from r2s2r.files import atomic_write_text

PROVENANCE_FILE = "provenance.json"


def dataset_provenance(root: str | Path, stage: str) -> dict:
    """The provenance entry of the dataset at `root`, from the recorder's commit where it has one."""
    commit = read_commit(Path(root)) or {}
    config = commit.get("config", {})
    return {
        "root": str(root),
        "policy_path": config.get("policy_path"),
        "policy_kwargs": config.get("policy_kwargs", {}),
        "episodes": len(commit.get("episodes", [])),
        "stage": stage,
    }


def read_provenance(model_dir: str | Path) -> list[dict]:
    """The entries of a model directory's provenance.json; [] where it has none."""
    path = Path(model_dir, PROVENANCE_FILE)
    if not path.is_file():
        return []
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path} is not valid JSON ({e.msg}); delete it or restore it from the run."
        ) from None


def write_provenance(model_dir: str | Path, entries: list[dict]) -> None:
    atomic_write_text(Path(model_dir, PROVENANCE_FILE), json.dumps(entries, indent=1))


def generated_by(entries: list[dict], policy_path: str) -> list[dict]:
    """The entries whose data `policy_path` recorded: the same directory (a checkpoint, or one inside a
    run's folder) or, for `package.module:factory` import paths, the same module."""

    def same(recorded: str | None) -> bool:
        if recorded is None:
            return False
        if ":" in policy_path and ":" in recorded and not Path(policy_path).exists():
            return recorded.split(":")[0] == policy_path.split(":")[0]
        a, b = Path(recorded).resolve(), Path(policy_path).resolve()
        return a == b or a.parent == b.parent  # checkpoints of the same run share a folder

    return [e for e in entries if same(e["policy_path"])]
