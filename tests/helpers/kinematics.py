"""MuJoCo's own forward kinematics of the ALOHA arms, to check the families' IK against (not `Arm.fk`)."""

from __future__ import annotations

import mujoco
import numpy as np

from families.arm import TCP_IN_GRIPPER, load_model


def mujoco_tcp(side: str, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TCP and gripper axes straight from MuJoCo's kinematics of a fresh model (not `Arm.fk`)."""
    model = load_model()
    data = mujoco.MjData(model)
    start = 0 if side == "left" else 8
    data.qpos[start : start + 6] = q
    mujoco.mj_kinematics(model, data)
    body = model.body(f"vx300s_{side}/gripper_link").id
    R = data.xmat[body].reshape(3, 3)
    return data.xpos[body] + R @ TCP_IN_GRIPPER, R
