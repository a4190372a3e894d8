"""What the robustness tests share: running a command line as a user does and reading its one error line,
finding what a failed run left behind, damaging files, and a full disk on demand."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import EPISODE_LENGTH, TINY_WORLD
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel

# The settings of conftest's `recorded` dataset as r2s2r-record flags: a run with them resumes it.
RECORD_FLAGS = [
    f"--episode_length={EPISODE_LENGTH}", "--world.num_envs=2", "--distribution=mixed", "--seed=7",
    f"--world.image_height={TINY_WORLD['image_height']}", f"--world.image_width={TINY_WORLD['image_width']}",
    f"--world.cameras=[{','.join(TINY_WORLD['cameras'])}]",
]  # fmt: skip


def one_error(capfd, prog: str) -> str:
    """The command's error: exactly one stderr line `<prog>: error: ...`, no traceback, no exception a
    destructor ignored. Returns the message after the prefix."""
    err = capfd.readouterr().err.replace("\r", "\n")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [line for line in err.splitlines() if f"{prog}: error:" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0].removeprefix(f"{prog}: error: ")


def leftovers(*roots: Path) -> list[str]:
    """Temporaries under `roots` that a finished or failed run must not leave: `.<name>.tmp` files and
    folders, `.<name>.old` folders, LeRobot's `tmpXXXX` encoding folders, `<name>.partial` recordings."""
    found = []
    for root in roots:
        if not root.exists():
            continue
        for p in root.rglob("*"):
            name = p.name
            if (
                (name.startswith(".") and (name.endswith(".tmp") or ".tmp." in name or name.endswith(".old")))
                or (p.is_dir() and re.fullmatch(r"tmp[A-Za-z0-9_]{8}", name))  # tempfile.mkdtemp's
                or name.endswith(".partial")
            ):
                found.append(str(p.relative_to(root)))
    return sorted(found)


def truncate(path: Path, keep: float | int = 0.5) -> None:
    """Cut `path` to `keep` bytes (an int) or that fraction of its size, as a copy killed mid-way would."""
    data = path.read_bytes()
    path.write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])


def zero_middle(path: Path) -> None:
    """Zero the middle third of `path`, as a disk error or a bad copy would."""
    data = bytearray(path.read_bytes())
    a, b = len(data) // 3, 2 * len(data) // 3
    data[a:b] = bytes(b - a)
    path.write_bytes(bytes(data))


def tiny_checkpoint(root: str, folder: Path, cameras=("top", "left_wrist"), **head) -> Path:
    """A tiny world model with `root`'s statistics, saved in `folder`."""
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(cameras=cameras, head=head))
    for p in model.denoiser.patch_out.parameters():  # an untrained DiT predicts exactly zero: give it a voice
        torch.nn.init.normal_(p, std=0.05)
    model.set_stats(ClipDataset(ClipConfig(root=root, cameras=cameras)).stats)
    return model.save_pretrained(folder)


def full_disk(error: int = errno.ENOSPC) -> OSError:
    return OSError(error, os.strerror(error))


class FullDiskOs:
    """Stands in for the `os` module of one r2s2r module (monkeypatch it in) on a disk that fills up: after
    `room` more calls of `os.write`, it writes half of what it is given and fails with ENOSPC; with
    `fsync_fails`, `os.fsync` fails so (which is where a buffered file's writes reach the disk)."""

    def __init__(self, room: int = 0, fsync_fails: bool = False):
        self.room, self.fsync_fails = room, fsync_fails

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.room > 0:
            self.room -= 1
            return os.write(fd, data)
        os.write(fd, bytes(data[: len(data) // 2]))
        raise full_disk()

    def fsync(self, fd):
        if self.fsync_fails:
            raise full_disk()
        return os.fsync(fd)


def kill_recording_mid_batch(root: Path, flags: list[str], after_episodes: int) -> None:
    """Run `r2s2r-record --root=root *flags` in a child process that dies (os._exit, as under kill -9) right
    after LeRobot saved its `after_episodes`-th episode of this run, in the middle of a batch."""
    script = textwrap.dedent(f"""
        import os, sys
        import r2s2r.robots.aloha  # torch before MuJoCo's GL, as the command line loads them
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        from r2s2r.scripts.record import main
        save, saved = LeRobotDataset.save_episode, []
        def save_then_die(self, *args, **kwargs):
            save(self, *args, **kwargs)
            saved.append(1)
            if len(saved) == {after_episodes}:
                os._exit(9)
        LeRobotDataset.save_episode = save_then_die
        sys.exit(main({[f"--root={root}", *flags]!r}))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 9:
        pytest.fail(
            f"the recording was meant to die mid-batch (exit 9), it exited {done.returncode}:\n{done.stderr}"
        )
