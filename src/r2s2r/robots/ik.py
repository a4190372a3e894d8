"""Damped-least-squares inverse kinematics for the two ViperX 300s arms of gym-aloha's ALOHA model.

The scripted demonstrators think in gripper poses (where the point between the fingers should be, and
which way the gripper points) but the world takes absolute joint targets. This module maps one to the
other on a private `mujoco.MjModel` copy of the task MJCF, used for kinematics only: it never steps
physics, so it cannot disturb the world it plans for.

Each `solve` runs a few DLS iterations per arm, warm-started from the previous solution; a demonstrator
tracks a slowly moving target, so a handful of iterations per control step keeps it converged. The module
also holds the Cartesian planning pieces the demonstrators share: minimum-jerk timing, orientation
interpolation and `PoseTrack`, one arm's scheduled moves and gripper ramps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Same import-order rule as robots/aloha.py: MuJoCo loads its GL backend on import, and torch must be
# loaded before Mesa or the process segfaults. This module never renders, but it may be imported first.
os.environ.setdefault("MUJOCO_GL", "egl")
import torch  # noqa: F401, E402

# isort: split
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from gym_aloha import constants as aloha_constants  # noqa: E402

SIDES = ("left", "right")
ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
# The grasp point (tool centre point) in the gripper_link frame: on the fingers' closing axis, 12 cm out,
# where the finger pads are still ~3 cm tall; a cube centred here is held by the pads, not the tips.
DEFAULT_TCP = (0.12, 0.0, 0.0)


def frame_from_axes(approach: np.ndarray, closing: np.ndarray) -> np.ndarray:
    """Gripper orientation (3,3) whose x axis points along `approach` and y axis along `closing`.

    gym-aloha's gripper_link has x pointing out of the gripper and the fingers sliding along y, so these
    two directions say everything about a grasp; `closing` is made orthogonal to `approach` here.
    """
    x = np.asarray(approach, dtype=float)
    x = x / np.linalg.norm(x)
    y = np.asarray(closing, dtype=float)
    y = y - x * (x @ y)
    y = y / np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)], axis=1)  # columns are the frame's axes in world coordinates


def rotation_error(rot: np.ndarray, rot_des: np.ndarray) -> np.ndarray:
    """World-frame rotation vector (3,) that turns `rot` towards `rot_des` (exact for small errors).

    This is half the sum of the column cross products, sin(angle) * axis, read off the skew part of
    rot_des @ rot.T: well defined except for exactly opposite frames, which a tracked plan never reaches.
    """
    m = rot_des @ rot.T  # (3,3)
    return 0.5 * np.array([m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]])


def cube_face_heading(quat: np.ndarray) -> float:
    """Heading (rad) of the cube's most horizontal face normal, from its (w, x, y, z) quaternion.

    Works for a cube lying on any face (a failed grasp can roll it), unlike a yaw angle.
    """
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, dtype=float))
    axes = mat.reshape(3, 3)  # columns: the cube's axes in world coordinates
    k = int(np.argmin(np.abs(axes[2])))
    return float(np.arctan2(axes[1, k], axes[0, k]))


@dataclass
class IKConfig:
    """Gains of the damped-least-squares solver."""

    damping: float = 0.03  # DLS damping (m): larger is steadier near singularities, slower to converge
    rot_weight: float = 0.25  # metres of position error worth one radian of orientation error
    max_step: float = 0.2  # largest joint change (rad) per iteration, so one bad target cannot whip an arm


class BimanualIK:
    """Forward and inverse kinematics of both ALOHA arms on a private kinematics-only MuJoCo model.

    Joint vectors here are (2,6): left arm then right arm, each in `ARM_JOINTS` order, the same order as
    the arm entries of the 14-D action (the grippers are not part of the kinematics).
    """

    def __init__(
        self,
        xml: str | Path | None = None,
        tcp: tuple[float, float, float] = DEFAULT_TCP,
        cfg: IKConfig | None = None,
    ):
        xml = Path(xml) if xml else aloha_constants.ASSETS_DIR / "bimanual_viperx_transfer_cube.xml"
        self.model = mujoco.MjModel.from_xml_path(str(xml))
        self.data = mujoco.MjData(self.model)
        self.cfg = cfg or IKConfig()
        self.tcp = np.asarray(tcp, dtype=float)
        joints = [[self.model.joint(f"vx300s_{s}/{j}") for j in ARM_JOINTS] for s in SIDES]
        self.qadr = np.array([[self.model.jnt_qposadr[j.id] for j in arm] for arm in joints])  # (2,6)
        self.dofadr = np.array([[self.model.jnt_dofadr[j.id] for j in arm] for arm in joints])  # (2,6)
        self.lower = np.array([[j.range[0] for j in arm] for arm in joints])  # (2,6)
        self.upper = np.array([[j.range[1] for j in arm] for arm in joints])  # (2,6)
        self.body = [self.model.body(f"vx300s_{s}/gripper_link").id for s in SIDES]
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))
        self._lam2 = self.cfg.damping**2 * np.eye(6)
        # Each arm's six joints are consecutive in qpos and qvel: slices index them without copies.
        if any((np.diff(adr) != 1).any() for adr in (*self.qadr, *self.dofadr)):
            raise ValueError(f"{xml.name}: arm joints are not consecutive in qpos/qvel, unlike gym-aloha's.")
        self._qslice = [slice(int(a[0]), int(a[0]) + 6) for a in self.qadr]
        self._dslice = [slice(int(a[0]), int(a[0]) + 6) for a in self.dofadr]
        self.base = np.array([self.model.body(f"vx300s_{s}").pos for s in SIDES])  # (2,3) arm base positions

    def _set(self, q: np.ndarray) -> None:
        for arm in range(2):
            self.data.qpos[self._qslice[arm]] = q[arm]
        mujoco.mj_kinematics(self.model, self.data)

    def _tcp_pose(self, arm: int) -> tuple[np.ndarray, np.ndarray]:
        """Grasp point (3,) and a view (3,3) of the gripper orientation, from the last `_set`."""
        rot = self.data.xmat[self.body[arm]].reshape(3, 3)
        return self.data.xpos[self.body[arm]] + rot @ self.tcp, rot

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grasp-point positions (2,3) and gripper orientations (2,3,3) for arm joints q (2,6)."""
        self._set(np.asarray(q, dtype=float))
        poses = [self._tcp_pose(a) for a in range(2)]
        return np.stack([p for p, _ in poses]), np.stack([r for _, r in poses])  # stack copies the views

    def solve(self, q: np.ndarray, pos: np.ndarray, rot: np.ndarray, iters: int = 3) -> np.ndarray:
        """Move arm joints q (2,6) towards grasp-point targets pos (2,3) with orientations rot (2,3,3).

        Returns the improved joints (2,6), clamped to the joint ranges; `fk` of them tells how close
        they got. Each iteration is one DLS step per arm: dq = J^T (J J^T + damping^2 I)^-1 err, with
        J and err stacking position and `rot_weight`-scaled orientation; MuJoCo's Cholesky solves the
        6x6 system, which is several times cheaper than numpy's general solver at this size.
        """
        q = np.array(q, dtype=float)  # (2,6)
        cfg, model, data = self.cfg, self.model, self.data
        jac, err = np.zeros((6, 6)), np.zeros((6, 1))  # one arm's stacked Jacobian and error
        gram, dy = np.zeros((6, 6)), np.zeros((6, 1))
        for _ in range(iters):
            self._set(q)
            mujoco.mj_comPos(model, data)  # mj_jac needs the com-based dof axes
            for arm in range(2):
                p, r = self._tcp_pose(arm)
                err[:3, 0] = pos[arm] - p
                err[3:, 0] = cfg.rot_weight * rotation_error(r, rot[arm])
                mujoco.mj_jac(model, data, self._jacp, self._jacr, p, self.body[arm])
                jac[:3] = self._jacp[:, self._dslice[arm]]
                np.multiply(self._jacr[:, self._dslice[arm]], cfg.rot_weight, out=jac[3:])
                np.matmul(jac, jac.T, out=gram)
                gram += self._lam2
                mujoco.mju_cholFactor(gram, 0.0)
                mujoco.mju_cholSolve(dy, gram, err)
                q[arm] += np.minimum(np.maximum(jac.T @ dy[:, 0], -cfg.max_step), cfg.max_step)
            q = np.minimum(np.maximum(q, self.lower), self.upper)
        return q


# ------------------------------------------------------------------ Cartesian trajectories
def min_jerk(s: float) -> float:
    """Minimum-jerk time scaling of progress s in [0,1]: zero velocity and acceleration at both ends."""
    s = min(max(s, 0.0), 1.0)
    return s * s * s * (10.0 + s * (-15.0 + 6.0 * s))


def slerp_rotation(rot0: np.ndarray, rot1: np.ndarray, s: float) -> np.ndarray:
    """Orientation (3,3) a fraction s of the shortest way from rot0 to rot1 (spherical interpolation)."""
    q0, q1 = np.zeros(4), np.zeros(4)
    mujoco.mju_mat2Quat(q0, rot0.ravel())
    mujoco.mju_mat2Quat(q1, rot1.ravel())
    dot = float(q0 @ q1)
    if dot < 0.0:  # q and -q are the same rotation; take the short arc
        q1, dot = -q1, -dot
    if dot > 0.9995:
        q = q0 + s * (q1 - q0)
    else:
        theta = np.arccos(dot)
        q = (np.sin((1.0 - s) * theta) * q0 + np.sin(s * theta) * q1) / np.sin(theta)
    q /= np.linalg.norm(q)
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, q)
    return out.reshape(3, 3)


class PoseTrack:
    """One arm's Cartesian plan: the current straight-line move of the grasp point and the gripper ramp.

    Moves are scheduled in control steps; before a move starts the arm holds where the last one ended,
    after it ends it holds the target. The gripper ramps linearly between normalized openings
    (0 closed, 1 open) on its own schedule, so a gripper event can come early or late relative to the arm.
    """

    def __init__(self, pos: np.ndarray, rot: np.ndarray, grip: float):
        self.p0, self.p1 = pos.copy(), pos.copy()
        self.r0, self.r1 = rot.copy(), rot.copy()
        self.t0, self.dur = 0, 1
        self.g0 = self.g1 = float(grip)
        self.gt0, self.gdur = 0, 1

    def pose(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Target grasp-point position (3,) and gripper orientation (3,3) at control step t."""
        s = min_jerk((t - self.t0) / self.dur)
        return self.p0 + s * (self.p1 - self.p0), slerp_rotation(self.r0, self.r1, s)

    def grip(self, t: int) -> float:
        """Normalized gripper command at control step t."""
        s = min(max((t - self.gt0) / self.gdur, 0.0), 1.0)
        return self.g0 + s * (self.g1 - self.g0)

    def move(self, t_start: int, dur: int, pos: np.ndarray, rot: np.ndarray) -> None:
        """Schedule a move to (pos, rot) from wherever the plan is at t_start, lasting dur steps."""
        self.p0, self.r0 = self.pose(t_start)
        self.p1, self.r1 = np.asarray(pos, dtype=float).copy(), np.asarray(rot, dtype=float).copy()
        self.t0, self.dur = t_start, max(int(dur), 1)

    def set_grip(self, t_start: int, dur: int, grip: float) -> None:
        """Schedule a gripper ramp to `grip` from its value at t_start, lasting dur steps."""
        self.g0 = self.grip(t_start)
        self.g1, self.gt0, self.gdur = float(grip), t_start, max(int(dur), 1)
