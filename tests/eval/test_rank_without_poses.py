"""Ranking from logs without object poses, as hardware records none: `--object_poses=false` ignores the
logged pose, logs without `observation.environment_state` are read the same way, and a state head that
cannot start without the pose is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from helpers.failures import one_error
from helpers.recordings import DEMONSTRATOR
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.eval.imagined import read_results
from r2s2r.eval.rank import RankConfig, rank
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rollout.world_model_env import WorldModelEnv
from r2s2r.scripts.rank import main

POSE = "observation.environment_state"
BLIND = Path(__file__).parents[2] / "assets" / "world_model_blind"  # its head reads no cameras
REACH = "helpers.policies:make_reach"
MANIFEST = {  # reach_a and reach_b: the same logs but for the recorded cube pose; bare: no pose recorded
    "reach_a": {"path": REACH, "kwargs": {"target": 0.3}},
    "reach_b": {"path": REACH, "kwargs": {"target": 0.3}},
    "bare": {"path": DEMONSTRATOR},  # acts on the object pose: the one the head reads off the cameras
}


def _rewrite_poses(root: Path, strip: bool) -> None:
    """Move the logged cube 5 cm along x, or (`strip`) remove the object pose as if never recorded."""
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        i = table.schema.get_field_index(POSE)
        if strip:
            table = table.remove_column(i)
        else:
            poses = [[p[0] + 0.05, *p[1:]] for p in table.column(i).to_pylist()]
            field = table.schema.field(i)
            table = table.set_column(i, field, pa.array(poses, type=field.type))
        pq.write_table(table, path)
    if strip:
        info = json.loads((root / "meta" / "info.json").read_text())
        del info["features"][POSE]
        (root / "meta" / "info.json").write_text(json.dumps(info))


@pytest.fixture(scope="module")
def setup(recorded, tmp_path_factory):
    """Three checkpoints' logs (copies of one recording) and a tiny world model whose head reads cameras."""
    root = tmp_path_factory.mktemp("poses")
    for name in MANIFEST:
        shutil.copytree(recorded[0].root, root / "logs" / name)
    _rewrite_poses(root / "logs" / "reach_b", strip=False)
    _rewrite_poses(root / "logs" / "bare", strip=True)
    (root / "zoo.yaml").write_text(json.dumps(MANIFEST))
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=model.config.cameras)).stats)
    return root, str(model.save_pretrained(root / "ckpt"))


def _rank(root: Path, ckpt: str, name: str, **overrides) -> dict:
    common = dict(logs_dir=str(root / "logs"), policies=str(root / "zoo.yaml"), output_dir=str(root / name))
    common.update(samples_per_start=2, max_steps=10, render=False, n_boot=50)
    common.update(overrides)
    return rank(RankConfig(checkpoint=ckpt, **common))


def _rows(root: Path, run: str, policy: str) -> list[dict]:
    rows = read_results(root / run / "policies" / policy / "episodes.jsonl")
    return sorted(({k: v for k, v in r.items() if k != "start"} for r in rows), key=str)


def test_without_object_poses_the_start_ignores_the_logged_pose(setup):
    root, ckpt = setup
    used, unused = _rank(root, ckpt, "used"), _rank(root, ckpt, "unused", object_poses=False)
    assert used["failed"] == [] and unused["failed"] == []  # the demonstrator acts on the head's poses
    # With the poses, a 5 cm shift of the logged cube changes what the model imagines; without, nothing.
    assert _rows(root, "used", "reach_a") != _rows(root, "used", "reach_b")
    assert _rows(root, "unused", "reach_a") == _rows(root, "unused", "reach_b")
    assert _rows(root, "unused", "reach_a") != _rows(root, "used", "reach_a")
    # Logs that never recorded a pose start the same way with the flag or without it.
    assert _rows(root, "used", "bare") == _rows(root, "unused", "bare")
    assert unused["settings"]["object_poses"] is False and used["settings"]["object_poses"] is True
    assert {p["name"]: p["object_poses"] for p in used["policies"]} == {
        "reach_a": True, "reach_b": True, "bare": False
    }  # fmt: skip
    assert not any(p["object_poses"] for p in unused["policies"])
    assert unused["object_poses"].startswith("not used: the imagined episodes started from cameras and")
    assert used["object_poses"] == "not in the logs of bare: those started from cameras and proprio only"
    on_disk = json.loads((root / "unused" / "rank.json").read_text())
    assert on_disk["object_poses"] == unused["object_poses"]
    html = (root / "unused" / "report.html").read_text()
    assert '<p id="object-poses"><b>Object poses:</b> not used: the imagined episodes started' in html


def test_reset_without_a_pose_shows_the_policy_the_heads_pose(setup):
    root, ckpt = setup
    model = WorldModel.from_pretrained(ckpt)
    data = ClipDataset(ClipConfig(root=str(root / "logs" / "bare"), cameras=model.config.cameras))
    first = data.start(data.episodes[0])
    assert POSE not in first
    env = WorldModelEnv(model, 1, render=False)
    obs = env.reset({k: v[None] for k, v in first.items() if k.startswith("observation.")})
    pose = obs[POSE]  # (1,7): the head's reading of the cameras, not a placeholder
    assert pose.shape == (1, 7) and torch.isfinite(pose).all() and pose.abs().sum() > 0


def test_a_head_without_cameras_cannot_rank_without_poses(setup, capfd):
    root, _ = setup
    out = root / "blind"
    flags = [f"--checkpoint={BLIND}", f"--logs_dir={root / 'logs'}", f"--policies={root / 'zoo.yaml'}"]
    assert main([*flags, f"--output_dir={out}", "--object_poses=false"]) == 2
    message = one_error(capfd, "r2s2r-rank")
    assert message.startswith(f"--object_poses=false: the state head of {BLIND} reads no cameras")
    assert "use a model whose head reads the cameras, such as assets/world_model_small" in message
    assert not out.exists()


def test_a_head_without_cameras_fails_logs_without_poses_by_name(setup, tmp_path):
    root, _ = setup
    shutil.copytree(root / "logs" / "bare", tmp_path / "logs" / "bare")
    logs = dict(logs_dir=str(tmp_path / "logs"), policies="")  # the policy: the recording's own sidecar
    payload = _rank(root, str(BLIND), "unused", output_dir=str(tmp_path / "out"), **logs)
    assert payload["policies"] == []
    (failed,) = payload["failed"]
    assert failed["name"] == "bare"
    assert f"{tmp_path / 'logs' / 'bare'} has no object poses ({POSE})" in failed["error"]
    assert "such as assets/world_model_small" in failed["error"]
