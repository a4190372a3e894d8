"""Forward and inverse kinematics of one ViperX arm, read from gym-aloha's MJCF through MuJoCo.

The held-out families need their own kinematics, independent of r2s2r's: this module owns a private
`MjModel`/`MjData` pair, writes joint angles into it and reads back the pose of the tool centre point (TCP),
a point between the finger pads, fixed in the gripper link. Inverse kinematics is damped least squares on
MuJoCo's own point Jacobian (`mj_jac`), so no link length is typed by hand.

Frames: the gripper link's x axis is the approach direction (from the wrist out through the fingers), its
y axis is the axis along which the fingers close, z completes the right-handed frame. A top-down grasp has
x = (0, 0, -1).
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
import torch  # noqa: F401, E402  (torch before MuJoCo: loaded after Mesa, its triton import segfaults)

# isort: split

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from gym_aloha import constants as aloha_constants  # noqa: E402

ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
# Finger pads span x = 0.064 .. 0.154 m of the gripper link (measured from the finger meshes); the TCP sits
# 2.9 cm inside the finger tips, so a cube centred on it is held by the outer half of the pads.
TCP_IN_GRIPPER = np.array([0.125, 0.0, 0.0])
# Gripper: the action is gym-aloha's normalized finger position, 0 closed, 1 open; each finger's joint q
# (m) is FINGER_CLOSE + command * (FINGER_OPEN - FINGER_CLOSE), clipped by the actuator to 0.021 .. 0.057.
# Its inner face lies at |y| = q - 0.0224 in the gripper frame: fully open leaves 6.9 cm between the pads,
# a command of ~0.6 just touches the 4 cm cube.
FINGER_CLOSE = aloha_constants.PUPPET_GRIPPER_POSITION_CLOSE
FINGER_OPEN = aloha_constants.PUPPET_GRIPPER_POSITION_OPEN


def load_model() -> mujoco.MjModel:
    """gym-aloha's transfer-cube MJCF (both arms and the cube), as the reference world loads it."""
    return mujoco.MjModel.from_xml_path(str(aloha_constants.ASSETS_DIR / "bimanual_viperx_transfer_cube.xml"))


def rotation(approach: np.ndarray, closing: np.ndarray) -> np.ndarray:
    """Gripper orientation (3,3), columns = gripper x, y, z in the world, from approach and closing axes.

    `closing` is made orthogonal to `approach` (its component along the approach is removed).
    """
    x = np.asarray(approach, dtype=float)
    x = x / np.linalg.norm(x)
    y = np.asarray(closing, dtype=float)
    y = y - x * (x @ y)
    y = y / np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)], axis=1)


class Arm:
    """Kinematics of one arm ("left" or "right") of the bimanual ALOHA, on a private copy of the model."""

    def __init__(self, side: str, model: mujoco.MjModel | None = None, tcp: np.ndarray = TCP_IN_GRIPPER):
        if side not in ("left", "right"):
            raise ValueError(f"side='{side}' must be 'left' or 'right'.")
        self.side = side
        self.model = model if model is not None else load_model()
        self.data = mujoco.MjData(self.model)
        joints = [self.model.joint(f"vx300s_{side}/{name}") for name in ARM_JOINTS]
        self.qpos_idx = np.array([j.qposadr[0] for j in joints])
        self.dof_idx = np.array([j.dofadr[0] for j in joints])
        self.lower = np.array([j.range[0] for j in joints])
        self.upper = np.array([j.range[1] for j in joints])
        self.body = self.model.body(f"vx300s_{side}/gripper_link").id
        self.tcp = np.asarray(tcp, dtype=float)
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))

    def _set(self, q: np.ndarray) -> None:
        self.data.qpos[self.qpos_idx] = q
        mujoco.mj_kinematics(self.model, self.data)

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TCP position (3,) and gripper orientation (3,3) at arm joint angles `q` (6,)."""
        self._set(q)
        R = self.data.xmat[self.body].reshape(3, 3).copy()
        return self.data.xpos[self.body] + R @ self.tcp, R

    def ik(
        self,
        pos: np.ndarray,
        rot: np.ndarray | None,
        q0: np.ndarray,
        iters: int = 100,
        rot_weight: float = 0.3,
        damping: float = 0.02,
        tol: float = 1e-4,
        roll_weight: float = 0.03,
    ) -> tuple[np.ndarray, float]:
        """Joint angles that put the TCP at `pos` with orientation `rot` (None: position only).

        Damped least squares from `q0`, clamped to the joint ranges. A soft extra row (`roll_weight` metres
        per radian) keeps the forearm roll near 0: its servo is the weakest of the arm (kp 10), and without
        it the solver wanders into the equivalent wrist-flipped branch (roll = pi). Returns the angles and
        the final task error (metres, plus `rot_weight` metres per radian of orientation error).
        """
        q = np.array(q0, dtype=float)
        roll_row = np.zeros((1, 6))
        roll_row[0, 3] = roll_weight
        err = np.inf
        for _ in range(iters):
            p, R = self.fk(q)
            e_pos = pos - p
            if rot is None:
                e = e_pos
            else:  # small-angle orientation error: half the sum of axis cross products
                e_rot = 0.5 * sum(np.cross(R[:, i], rot[:, i]) for i in range(3))
                e = np.concatenate([e_pos, rot_weight * e_rot])
            err = float(np.linalg.norm(e))
            if err < tol:
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jac(self.model, self.data, self._jacp, self._jacr, p, self.body)
            J = self._jacp[:, self.dof_idx]
            if rot is not None:
                J = np.concatenate([J, rot_weight * self._jacr[:, self.dof_idx]])
            J, e = np.concatenate([J, roll_row]), np.append(e, -roll_weight * q[3])
            dq = J.T @ np.linalg.solve(J @ J.T + damping**2 * np.eye(len(e)), e)
            q = np.clip(q + dq, self.lower, self.upper)
        return q, err
