"""A full disk while recording, evaluating or training: ENOSPC injected where the bytes are written (and,
where this machine allows it, a real 384 KiB tmpfs). One error line, nothing half-written or temporary left,
no destructor's complaint, and the same command resumes once there is room."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections import namedtuple

import pytest

from helpers.failures import RECORD_FLAGS as FLAGS
from helpers.failures import FullDiskOs, full_disk, leftovers, one_error, tiny_checkpoint
from r2s2r import files
from r2s2r.data.commit import check_committed
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.eval.imagined import read_results, results_digest
from r2s2r.scripts import eval as eval_cli
from r2s2r.scripts import record, train


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    return tiny_checkpoint(recorded[0].root, tmp_path_factory.mktemp("ckpt") / "tiny")


def _no_destructor_complaints():
    """Run the destructors a failed write may have left pending; none may raise (pytest would warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pytest.PytestUnraisableExceptionWarning)
        gc.collect()


def _encoder_on_a_full_disk(monkeypatch):
    """LeRobot's video encoder writes half an MP4 into its temporary folder under the dataset, then the disk
    is full. (LeRobot encodes in worker processes, which see this patch because Linux forks them.)"""
    import lerobot.datasets.lerobot_dataset as lerobot_dataset

    def encode(imgs_dir, video_path, *args, **kwargs):
        video_path.parent.mkdir(parents=True, exist_ok=True)
        video_path.write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(1000))
        raise full_disk()

    monkeypatch.setattr(lerobot_dataset, "encode_video_frames", encode)


def test_recording_rolls_the_batch_back_and_resumes(recorded, tmp_path, capfd, monkeypatch):
    root = tmp_path / "demo"
    shutil.copytree(recorded[0].root, root)  # 2 committed episodes
    _encoder_on_a_full_disk(monkeypatch)
    assert record.main([f"--root={root}", "--num_episodes=4", *FLAGS]) == 2
    _no_destructor_complaints()
    assert one_error(capfd, "r2s2r-record") == (
        f"the disk is full: recording into {root} failed; the batch was rolled back and the dataset keeps "
        "its 2 complete episodes: free space and re-run the command to resume."
    )
    assert leftovers(tmp_path) == []  # no tmpXXXX/*.mp4, no PNG staging, no half parquet
    check_committed(root)
    assert ClipDataset(ClipConfig(root=str(root))).episodes == [0, 1]
    monkeypatch.undo()  # space was freed
    assert record.main([f"--root={root}", "--num_episodes=4", *FLAGS]) == 0
    assert ClipDataset(ClipConfig(root=str(root))).episodes == [0, 1, 2, 3]


def test_a_first_batch_on_a_full_disk_leaves_nothing(tmp_path, capfd, monkeypatch):
    _encoder_on_a_full_disk(monkeypatch)
    assert record.main([f"--root={tmp_path / 'new'}", "--num_episodes=2", *FLAGS]) == 2
    _no_destructor_complaints()
    assert "keeps its 0 complete episodes" in one_error(capfd, "r2s2r-record")
    assert list(tmp_path.iterdir()) == []


def test_a_swallowed_enospc_is_still_reported_as_a_full_disk(recorded, tmp_path, capfd, monkeypatch):
    """LeRobot's image writer prints the ENOSPC of a frame it cannot write and goes on; the batch then fails
    on reading that frame back, with an error that does not say why. The disk's free space does."""
    import lerobot.datasets.lerobot_dataset as lerobot_dataset

    root = tmp_path / "demo"
    shutil.copytree(recorded[0].root, root)
    monkeypatch.setattr(
        lerobot_dataset, "write_image", lambda image, fpath, **kw: print(f"Error writing {fpath}")
    )
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(files.shutil, "disk_usage", lambda path: usage(2**21, 2**21, 0))
    assert record.main([f"--root={root}", "--num_episodes=4", *FLAGS]) == 2
    assert one_error(capfd, "r2s2r-record").startswith(f"the disk is full: recording into {root} failed;")
    assert leftovers(tmp_path) == [] and not (root / "images").exists()
    check_committed(root)


def _eval_flags(recorded, checkpoint, out, *extra):
    return [
        f"--checkpoint={checkpoint}", f"--starts=[{recorded[0].root}]", "--max_steps=5",
        "--samples_per_start=2", "--batch_size=2", f"--output={out}", *extra,
    ]  # fmt: skip


def test_evaluation_keeps_whole_batches_and_resumes_to_the_same_results(
    recorded, checkpoint, tmp_path, capfd, monkeypatch
):
    whole = tmp_path / "whole" / "episodes.jsonl"
    assert eval_cli.main(_eval_flags(recorded, checkpoint, whole)) == 0
    out = tmp_path / "cut" / "episodes.jsonl"
    monkeypatch.setattr(files, "os", FullDiskOs(room=1))  # the first batch's rows fit, the second's do not
    assert eval_cli.main(_eval_flags(recorded, checkpoint, out)) == 2
    assert one_error(capfd, "r2s2r-eval") == (
        f"the disk is full: writing {out} failed (nothing half-written was kept); free space or write "
        "elsewhere, then re-run."
    )
    assert out.read_text().endswith("\n") and len(read_results(out)) == 2  # one whole batch, no cut line
    assert leftovers(tmp_path) == [] and not (out.parent / "summary.json").exists()
    monkeypatch.undo()
    assert eval_cli.main(_eval_flags(recorded, checkpoint, out)) == 0
    assert results_digest(out) == results_digest(whole)


def test_evaluation_video_on_a_full_disk(recorded, checkpoint, tmp_path, capfd, monkeypatch):
    from r2s2r.eval import video

    frames = video._frames

    def two_frames_then_full(canvas, slots, scale):
        yield from list(frames(canvas, slots, scale))[:2]
        raise full_disk()

    monkeypatch.setattr(video, "_frames", two_frames_then_full)
    out = tmp_path / "eval" / "episodes.jsonl"
    assert eval_cli.main(_eval_flags(recorded, checkpoint, out, "--videos=[0]")) == 2
    mp4 = out.parent / "videos" / "episode_000000.mp4"
    assert one_error(capfd, "r2s2r-eval").startswith(f"the disk is full: writing {mp4} failed")
    assert leftovers(tmp_path) == [] and not mp4.exists()


def test_evaluation_summary_on_a_full_disk(recorded, checkpoint, tmp_path, capfd, monkeypatch):
    disk = FullDiskOs(room=100)
    fsyncs = []

    def fsync(fd):  # the header and both batches reach the disk, the summary does not
        fsyncs.append(fd)
        if len(fsyncs) > 3:
            raise full_disk()

    disk.fsync = fsync
    monkeypatch.setattr(files, "os", disk)
    out = tmp_path / "eval" / "episodes.jsonl"
    assert eval_cli.main(_eval_flags(recorded, checkpoint, out)) == 2
    summary = out.parent / "summary.json"
    assert one_error(capfd, "r2s2r-eval").startswith(f"the disk is full: writing {summary} failed")
    assert leftovers(tmp_path) == [] and not summary.exists() and len(read_results(out)) == 4


def test_training_checkpoint_on_a_full_disk(recorded, tmp_path, capfd, monkeypatch):
    from r2s2r.training import checkpoint

    saves = {"n": 0}
    real_save = checkpoint.save_file

    def save_file(tensors, path, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 3:  # the first checkpoint's third file
            raise full_disk()
        return real_save(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", save_file)
    out = tmp_path / "run"
    flags = [
        "--preset=tiny", f"--data.root={recorded[0].root}", f"--output_dir={out}", "--steps=2",
        "--batch_size=4", "--save_every=2", "--log_every=2", "--num_workers=0", "--warmup_steps=1",
    ]  # fmt: skip
    assert train.main(flags) == 2
    assert one_error(capfd, "r2s2r-train").startswith(
        f"the disk is full: writing {out / 'checkpoints' / '0000002'} failed (nothing half-written was kept)"
    )
    assert leftovers(tmp_path) == [] and list((out / "checkpoints").iterdir()) == []


TMPFS_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    disk, root, checkpoint, flags = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(disk)]).returncode:
        print(json.dumps({"mounted": False})); sys.exit(0)
    def run(*args):
        done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)
        return {"code": done.returncode, "stderr": done.stderr.replace("\\r", "\\n"), "stdout": done.stdout}
    report = {"mounted": True}
    report["record"] = run("r2s2r.scripts.record", f"--root={disk / 'rec'}", "--num_episodes=20", *flags)
    report["record_left"] = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
    if (disk / "rec").exists():  # the batches that fit: committed, nothing of the one that did not
        from r2s2r.data.commit import check_committed, read_commit
        check_committed(disk / "rec")
        report["record_episodes"] = len(read_commit(disk / "rec")["episodes"])
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk, then give 8 KiB back: room for the header and a few rows
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - 8192))
    os.close(fd)
    output = disk / "e.jsonl"
    report["eval"] = run("r2s2r.scripts.eval", f"--checkpoint={checkpoint}", f"--starts=[{root}]",
                         "--max_steps=5", "--samples_per_start=8", "--batch_size=1", f"--output={output}")
    report["eval_left"] = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
    report["eval_tail"] = (disk / "e.jsonl").read_text()[-1:] if (disk / "e.jsonl").exists() else ""
    print(json.dumps(report))
""")


def test_a_real_full_disk(recorded, checkpoint, tmp_path):
    """Recording and evaluation onto a 384 KiB tmpfs mounted in a private mount namespace (root only)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    disk = tmp_path / "disk"
    disk.mkdir()
    args = [str(disk), recorded[0].root, str(checkpoint), json.dumps(FLAGS)]
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", TMPFS_SCRIPT, *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode or not done.stdout.strip() or not json.loads(done.stdout)["mounted"]:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()[-200:]})")
    report = json.loads(done.stdout)
    for command, prog in (("record", "r2s2r-record"), ("eval", "r2s2r-eval")):
        err = report[command]["stderr"]
        assert report[command]["code"] == 2, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        [line] = [x for x in err.splitlines() if f"{prog}: error:" in x]
        assert line.startswith(f"{prog}: error: the disk is full"), line
    left = report["record_left"]
    assert not [p for p in left if "/tmp" in p or "/images" in p or p.endswith((".tmp", ".partial"))], left
    assert report.get("record_episodes", 0) < 20  # the disk filled up after a few whole batches, if any
    assert sorted(set(report["eval_left"]) - set(left)) in (["e.jsonl", "filler"], ["filler"])
    assert report["eval_tail"] in ("", "\n")  # whole rows only
