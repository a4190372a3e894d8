"""Forward kinematics of the grasp points in torch agree with MuJoCo's own on the robot's MJCF."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from r2s2r.robots.checker import PhysicsChecker
from r2s2r.robots.kinematics import GraspKinematics
from r2s2r.robots.spec import EmbodimentSpec, robot_spec


def test_grasp_points_and_frames_match_mujoco():
    spec = robot_spec("aloha")
    fk, checker = GraspKinematics(spec), PhysicsChecker(spec)
    states = np.random.default_rng(0).uniform(spec.position_lower, spec.position_upper, size=(40, 14))
    point, rot = fk(torch.tensor(states, dtype=torch.float64))
    model, data = checker.model, checker.data
    for i, qpos in enumerate(checker.qpos(states)):
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        for g, side in enumerate(("left", "right")):
            body = model.body(f"vx300s_{side}/gripper_link").id
            xmat = data.xmat[body].reshape(3, 3)
            np.testing.assert_allclose(rot[i, g].numpy(), xmat, atol=1e-6)
            np.testing.assert_allclose(point[i, g].numpy(), data.xpos[body] + xmat @ [0.12, 0, 0], atol=1e-6)
    # Batched over any leading dims; the left grasp point ignores the right arm's joints.
    moved = torch.tensor(states[:4], dtype=torch.float32).reshape(2, 2, 14).clone()
    before = fk(moved)[0]
    moved[..., 7:] += 0.3
    after = fk(moved)[0]
    assert torch.equal(after[..., 0, :], before[..., 0, :])
    assert not torch.allclose(after[..., 1, :], before[..., 1, :])


def test_robot_without_grasp_frames_is_refused():
    spec = robot_spec("aloha")
    other = EmbodimentSpec(**{**spec.__dict__, "name": "other"})
    with pytest.raises(ValueError, match="no grasp frames"):
        GraspKinematics(other)
