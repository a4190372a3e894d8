"""Family 29, `twohand`: both arms grasp the cube on the table together, lift it, then the right lets go.

How it acts. No hand-over: the two grippers close on the cube at the same step while it lies on the table.
Each arm's motion has two parts. First a joint-space quintic (minimum jerk) from the start pose to the
pre-grasp, solved once by damped least-squares IK (`arm.py`) when the cube pose is read (`READ`, once it has
landed). Then straight Cartesian lines of the tool centre point (TCP) at a fixed gripper orientation, eased
by the cubic smoothstep and solved by IK at every step (warm-started from the previous solution): down to the
grasp, up for the joint lift, and for the right, back off and up. The two arms' lines share one clock, so
they move in step unless a lag knob shifts one of them.

Geometry (world frame, metres). The cube's face normal nearest world y is the pinch axis n; both grippers
close along n, so both hold the same pair of faces, each one half of it: the left on the -x half, the right
on the +x half, mirror images of each other across the cube's mid-plane. Each approach lies in the plane
normal to n, tilted `TILT` from vertical toward the other arm (the wrists lean apart, so the palms clear each
other), the TCP `GAP` from the mid-plane and `HEIGHT` above the cube's centre. Pre-grasp `ABOVE` back along
the approach; lift `lift` straight up; the right then opens, backs `BACK` along its approach and rises.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs (see
`TwohandKnobs`; defaults = nominal) are what a user of such a controller gets wrong: one hand out of sync
(`left_lag`, `right_lag`: its close and lift start late), a grasp offset of the left or the right (outward
from the mid-plane, i.e. a hand that holds less of the cube, and up), a weak squeeze of the left (~0.6
touches the cube), the right letting go early (`release_shift` < 0: before or during the lift) or dragging
the cube as it backs off (`release_open`: how far it opens first), the lift's height and speed, a stale cube
reading (planned on the first observation, while the cube still drops onto the table) and smooth joint
noise. Settings were tuned on the reference world's success only (left finger on the cube, cube off the
table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm, rotation
from families.common import (
    GRIPPER_OPEN,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    episode_rng,
    minimum_jerk,
    refuse_invalid,
    smooth_noise,
    smoothstep,
)

EPISODE_STEPS = 400
TILT = 0.45  # rad: each approach tilted from vertical toward the other arm
GAP = 0.017  # m: each TCP this far from the cube's mid-plane (normal to the pinch axis), on its own side
HEIGHT = 0.012  # m: TCP above the cube's centre at the grasp
ABOVE = 0.07  # m: pre-grasp back along the approach
BACK = 0.10  # m: the right backs off this far along its approach after letting go
NOISE_TAU = 20.0  # steps: correlation time of the joint noise
# Step schedule (50 Hz): read the cube, reach the pre-grasp, reach the grasp, close, lift, release, back off.
READ, PRE, DOWN, CLOSE, LIFT0 = 10, 70, 100, 100, 118
RELEASE_AFTER, BACK_STEPS = 12, 40  # the right opens this long after the lift ends, then backs off


@dataclass
class TwohandKnobs:
    """How the bimanual grasp deviates from its nominal tuning; defaults = nominal."""

    left_lag: int = 0  # steps the left's close and lift start after the right's
    right_lag: int = 0  # steps the right's close and lift start after the left's
    left_offset: float = 0.0  # m, the left's grasp moved outward from the mid-plane (holds less cube)
    right_offset: float = 0.0  # m, the right's grasp moved outward from the mid-plane
    left_height: float = 0.0  # m, the left's grasp raised
    left_squeeze: float = 0.0  # the left's closed command (0 fully closed, ~0.6 touches the cube)
    release_shift: int = 0  # steps the right's release moves (< 0: earlier, before or during the lift)
    release_open: float = GRIPPER_OPEN  # how far the right opens before it backs off (< ~0.6: drags)
    lift: float = 0.08  # m, height of the joint lift
    lift_steps: int = 40  # steps of the joint lift (fewer: faster)
    stale: bool = False  # True: planned on the first observation (the cube still dropping)
    joint_noise: float = 0.0  # rad, stationary std of smooth noise on every commanded arm joint
    seed: int = 0  # seeds the joint noise together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "left_lag": 0 <= self.left_lag <= 150,
            "right_lag": 0 <= self.right_lag <= 150,
            "left_squeeze": 0.0 <= self.left_squeeze <= 1.0,
            "release_open": 0.0 <= self.release_open <= 1.0,
            "release_shift": -(LIFT0 + 40 + RELEASE_AFTER - CLOSE) <= self.release_shift <= 100,
            "lift": 0.0 <= self.lift <= 0.2,
            "lift_steps": 1 <= self.lift_steps <= 150,
            "joint_noise": self.joint_noise >= 0,
        }
        refuse_invalid(self, checks)


# -------------------------------------------------------------------------------------------- geometry
def pinch_axes(cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pinch axis n (3,) (the cube face normal nearest world +y) and the mid-plane axis m (3,)
    (horizontal, normal to n, nearest world +x: from the left's half to the right's)."""
    yaws = cube_yaw(cube[3:7]) + np.arange(4) * np.pi / 2
    normals = np.stack([np.cos(yaws), np.sin(yaws), np.zeros(4)], axis=1)
    n = normals[int(np.argmax(normals[:, 1]))]
    return n, np.array([n[1], -n[0], 0.0])


def grasp_pose(cube: np.ndarray, side: str, k: TwohandKnobs) -> tuple[np.ndarray, np.ndarray]:
    """TCP position (3,) and gripper rotation (3,3) of `side`'s grasp on the cube pose (7,)."""
    n, m = pinch_axes(cube)
    out = -m if side == "left" else m  # from the mid-plane toward this arm's half
    approach = np.cos(TILT) * np.array([0.0, 0.0, -1.0]) - np.sin(TILT) * out  # leaning in, wrist outside
    closing = n if side == "left" else -n  # the fingers' natural (unrolled) axis: left of the heading
    offset = k.left_offset if side == "left" else k.right_offset
    height = HEIGHT + (k.left_height if side == "left" else 0.0)
    pos = cube[:3] + (GAP + offset) * out + np.array([0.0, 0.0, height])
    return pos, rotation(approach, closing)


def quintic(q0: np.ndarray, q1: np.ndarray, t0: int, t1: int, t: int) -> np.ndarray:
    """Joint-space minimum-jerk move from q0 at step t0 to q1 at step t1."""
    return q0 + minimum_jerk((t - t0) / (t1 - t0)) * (q1 - q0)


def line(keys: list[tuple[int, np.ndarray]], t: int) -> np.ndarray:
    """Position at step t on straight segments between (step, position) keys, each eased by smoothstep."""
    if t <= keys[0][0]:
        return keys[0][1]
    for (t0, p0), (t1, p1) in zip(keys[:-1], keys[1:], strict=True):
        if t < t1:
            return p0 + smoothstep((t - t0) / (t1 - t0)) * (p1 - p0)
    return keys[-1][1]


# --------------------------------------------------------------------------------------------- episode
class TwohandEpisode:
    """One episode: both arms' schedules, planned at `READ` (or at the first step if stale)."""

    def __init__(self, knobs: TwohandKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        rng = episode_rng(knobs.seed, state, cube)
        self.noise = smooth_noise(rng, EPISODE_STEPS, 12, knobs.joint_noise, NOISE_TAU)
        self.start = {"left": state[:6].copy(), "right": state[7:13].copy()}
        self.q = dict(self.start)
        self.first = cube.copy()
        self.planned_on: np.ndarray | None = None
        self.keys: dict = {}
        self.rot: dict = {}
        self.pre_q: dict = {}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}

    def close_step(self, side: str) -> int:
        return CLOSE + (self.k.left_lag if side == "left" else self.k.right_lag)

    def release_step(self) -> int:
        return LIFT0 + self.k.right_lag + self.k.lift_steps + RELEASE_AFTER + self.k.release_shift

    def plan(self, cube: np.ndarray) -> None:
        """Pre-grasp joints (IK once) and both arms' Cartesian keys from the cube pose (7,)."""
        self.planned_on = cube.copy()
        for side, arm in self.arms.items():
            pos, R = grasp_pose(cube, side, self.k)
            pre = pos - ABOVE * R[:, 0]
            self.pre_q[side], _ = arm.ik(pre, R, self.start[side], iters=300)
            lag = self.k.left_lag if side == "left" else self.k.right_lag
            up = pos + [0.0, 0.0, self.k.lift]
            lift0 = LIFT0 + lag
            keys = [(PRE, pre), (DOWN, pos), (lift0, pos), (lift0 + self.k.lift_steps, up)]
            if side == "right":
                t = max(self.release_step(), lift0 + 1) + 8
                away = up - BACK * R[:, 0] + [0.0, 0.0, 0.05]
                keys = keys if t <= keys[-1][0] else [*keys, (t, up)]
                keys = [*keys, (max(t, keys[-1][0]) + BACK_STEPS, away)]
            self.keys[side], self.rot[side] = keys, R

    def joints(self, side: str, t: int) -> np.ndarray:
        arm = self.arms[side]
        if side in self.keys and t < PRE:
            self.q[side] = quintic(self.start[side], self.pre_q[side], READ, PRE, max(t, READ))
        elif side in self.keys:
            self.q[side], _ = arm.ik(
                line(self.keys[side], t), self.rot[side], self.q[side], iters=30, tol=2e-4
            )
        noise = self.noise[t, :6] if side == "left" else self.noise[t, 6:]
        return np.clip(self.q[side] + noise, arm.lower, arm.upper)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        t = min(t, EPISODE_STEPS - 1)
        if t == (0 if self.k.stale else READ):
            self.plan(
                self.first if self.k.stale else batch["observation.environment_state"][b][:7].astype(float)
            )
        if t == self.close_step("left"):
            self.grip["left"] = self.k.left_squeeze
        if t == self.close_step("right"):
            self.grip["right"] = 0.0
        if t == self.release_step():
            self.grip["right"] = self.k.release_open
        q_left, q_right = self.joints("left", t), self.joints("right", t)
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.twohand:make_policy` with `TwohandKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(TwohandKnobs, "twohand", kwargs), TwohandEpisode)


# Named settings for measure.py, as a user of such a controller would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "stale_cube": {"stale": True},
    "late_left": {"left_lag": 40},
    "dragging_right": {"release_open": 0.4},
    "noisy_joints": {"joint_noise": 0.04},
    "weak_left": {"left_squeeze": 0.62},
    "very_noisy_joints": {"joint_noise": 0.07},
    "early_release_weak_left": {"left_squeeze": 0.6, "release_shift": -70},
    "high_left": {"left_height": 0.045},
    "left_outward": {"left_offset": 0.02},
}
