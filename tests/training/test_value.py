"""The base value: its features by hand, fitting on a base policy's own episodes, saving and loading."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from r2s2r.data.recorder import RecordConfig, record
from r2s2r.policies.policy import PolicyConfig
from r2s2r.robots.aloha import WorldConfig
from r2s2r.robots.kinematics import GraspKinematics
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.value import BaseValue
from r2s2r.scripts import fit_value as fit_value_cli
from r2s2r.training.value import ValueConfig, fit_value, read_states

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"


@pytest.fixture(scope="module")
def sloppy(tmp_path_factory):
    """Eight whole episodes (400 steps) of the sloppy demonstrator, state-only: 5 succeed, 3 fail."""
    root = tmp_path_factory.mktemp("value") / "sloppy"
    summary = record(
        RecordConfig(
            root=str(root), num_episodes=8, episode_length=400, distribution="mixed", seed=3,
            world=WorldConfig(num_envs=8, cameras=()),
            policy=PolicyConfig(path=DEMONSTRATOR, kwargs={"skill": "sloppy"}),
        )
    )  # fmt: skip
    return str(root), [e["success"] for e in summary.episodes]


def test_features_relate_the_object_to_each_gripper_and_count_the_time_left():
    """A cube placed exactly at the right gripper's grasp point is at (0,0,0) in that gripper's frame and 0 m
    from it; the time left is 1 - step / episode length."""
    spec = robot_spec("aloha")
    value = BaseValue("aloha", 14, 7, episode_steps=400, members=1, hidden=4)
    state = torch.zeros(2, 14)
    state[1, 1] = -0.5  # another shoulder angle for the second env
    point, _ = GraspKinematics(spec)(state)
    env = torch.zeros(2, 7)
    env[:, :3] = point[:, 1]  # the cube at the right gripper's grasp point
    env[:, 3] = 1.0
    f = value.features(state, env, torch.tensor([0, 300]))
    G = 2
    in_gripper = f[:, 14 + 7 + 3 * G : 14 + 7 + 6 * G].reshape(2, G, 3)
    distance = f[:, 14 + 7 + 6 * G : 14 + 7 + 7 * G]
    assert torch.allclose(in_gripper[:, 1], torch.zeros(2, 3), atol=1e-6)
    assert torch.allclose(distance[:, 1], torch.zeros(2), atol=1e-6)
    assert torch.allclose(distance[:, 0], (point[:, 0] - point[:, 1]).norm(dim=-1))
    assert torch.allclose(f[:, -1], torch.tensor([1.0, 0.25]))
    with pytest.raises(ValueError, match="proprio of 14 and object state of 7"):
        value.features(torch.zeros(2, 12), env, torch.zeros(2))


def test_a_fitted_value_rates_the_states_of_successful_episodes_higher(sloppy, tmp_path):
    root, outcomes = sloppy
    assert 0 < sum(outcomes) < len(outcomes)  # both outcomes to learn from
    cfg = ValueConfig(data=[root], output_dir=str(tmp_path / "v"), members=2, steps=300, heldout=0.25)
    value, report = fit_value(cfg)
    assert report["episodes"] == 8 and report["heldout"]["episodes"] == 2
    assert report["success_rate"] == pytest.approx(np.mean(read_states([root], "aloha", 10)["success"]))
    data = read_states([root], "aloha", 10)
    odds = value(
        torch.from_numpy(data["state"]), torch.from_numpy(data["env"]), torch.from_numpy(data["step"])
    )
    assert odds.shape == (2, len(data["success"]))
    mean = odds.mean(0).numpy()
    won, lost = mean[data["success"] > 0.5], mean[data["success"] < 0.5]
    assert won.mean() > lost.mean() + 0.2
    # saved atomically and loaded exactly; fitting again with the same seed gives the same weights
    loaded = BaseValue.from_pretrained(tmp_path / "v")
    for (k, a), b in zip(value.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    again, _ = fit_value(ValueConfig(**{**cfg.__dict__, "output_dir": str(tmp_path / "v2")}))
    assert all(torch.equal(a, b) for a, b in zip(value.parameters(), again.parameters(), strict=True))
    assert not (tmp_path / "v.tmp").exists()


def test_the_cli_fits_and_reports_and_bad_input_is_refused(sloppy, tmp_path, capsys):
    root, _ = sloppy
    out = tmp_path / "cli"
    code = fit_value_cli.main([f"--data=[{root}]", f"--output_dir={out}", "--members=1", "--steps=20"])
    assert code == 0 and (out / "fit.json").is_file()
    assert "held-out 2 episodes: AUC" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="r2s2r-fit-value"):
        BaseValue.from_pretrained(tmp_path / "nothing")
    (tmp_path / "wm").mkdir()
    (tmp_path / "wm" / "config.json").write_text('{"robot": "aloha"}')
    with pytest.raises(ValueError, match="not a base value"):
        BaseValue.from_pretrained(tmp_path / "wm")
    assert fit_value_cli.main(["--data=[]", f"--output_dir={out}"]) == 2  # no data: a one-line error
    with pytest.raises(ValueError, match="no episodes|members"):
        ValueConfig(data=[root], members=0)
