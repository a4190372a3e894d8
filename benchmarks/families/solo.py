"""Family 27, `solo`: the left arm alone picks the cube off the table; the right only pushes it within reach.

How it acts. No mid-air hand-over. Every move is a Cartesian path of the tool centre point (TCP) between
keyframes, eased by the minimum-jerk quintic; the orientation turns along the geodesic between the
keyframes' rotations (the axis-angle of R0^T R1, scaled by the same ease). At every control step the pose
on the path is solved by damped least-squares IK (`arm.py`), warm-started from the previous step's solution,
and the joints are commanded directly. Paths are fixed when they start: the right's at the first step, the
left's staging at the first step and its pick at `REREAD`, from the cube pose observed then.

Geometry (world frame, metres; the left's base at x = -0.469, y = 0.5):
1. Push (right arm), only if the cube's centre lies more than `REACH` from the left's base: the right comes
   down top-down, fingers fully OPEN, closing axis along the push, straddling the cube (a pad 1.5 cm off
   each of two opposite faces), tips `PUSH_TIP_Z` above the table. It then slides along the cube face
   normal that points most toward -x: the trailing pad, flat and vertical, pushes the whole rear face from
   the table up (no tipping), the leading pad cages the cube so that it cannot squirt ahead. The push ends
   where the cube's centre lies `PUSH_TO` from the left's base; the right dwells, centres its pads off the
   faces (dragged up along a face, the cube would rise with them), rises straight up and parks high on
   its own side.
2. Staging (left arm): top-down, `STAGE_BACK` short of the cube's expected end (toward its own base), high
   (`STAGE_Z`), out of the right's way while it pushes.
3. Pick (left arm): at `REREAD` it reads the cube pose where it lies, heads from its base toward the cube,
   comes down top-down (the approach tilted by `tilt` to point away from its base, the wrist nearer it),
   the wrist turned so that the fingers close on the cube face pair nearer its natural (unturned) finger
   axis; TCP `grasp_height` above the cube's centre (tips 2.9 cm further down, near the table), closes,
   and lifts `LIFT` straight up, then holds.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs (see
`SoloKnobs`; defaults = nominal) are what a user of such a controller gets wrong: grasp offsets along the
left's heading and along its finger axis, the grasp height, closing early (during the descent) or late
(during the lift), a weak squeeze (a closed command only slightly past the cube's width, ~0.6 touches),
a fast lift, a push short of what is needed (`push_fraction`; 0: no push, the left reaches out as far as
the cube lies), a stale cube reading (the pick planned on the pose read at the first step, before the
push), a tilted approach, joint noise (smooth, per joint). The reference world's success is lenient (the
left finger touching the cube, the cube off the table): a tilt up to ~1.2 rad, a grasp 4.8 cm above the
centre or 3.5 cm off along the heading all still succeed; the settings' knob values were tuned on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    LEFT_BASE,
    RIGHT_BASE,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    episode_rng,
    gripper_rot,
    minimum_jerk,
    refuse_invalid,
    rotvec_matrix,
    smooth_noise,
    top_down_roll,
)

EPISODE_STEPS = 400
REACH = 0.50  # m: beyond this distance (cube centre to the left's base, in the table plane) the right pushes
PUSH_TO = 0.43  # m: the push leaves the cube's centre this far from the left's base
PUSH_TIP_Z = 0.006  # m: the pusher's finger tips above the table (the cube's centre is at 0.02)
TIP_BEYOND_TCP = 0.029  # m: finger tips past the TCP along the approach (arm.py)
# The pusher is open, its closing axis along the push: the cube sits between its pads (inner faces at
# +-PAD_OPEN from the TCP), the trailing pad, flat and vertical, pushes the whole rear face from the table
# up, and the leading pad cages the cube so that it cannot squirt ahead.
PAD_OPEN = 0.057 - 0.0224  # m: a fully open finger's inner face off the TCP along the closing axis (arm.py)
# m: the pusher's command leads its goal by this much: pushing at full stretch, its servos settle ~1.3 cm
# short of the command (measured here in the reference world, ID poses 0-9)
PUSH_LEAD = 0.013
STANDOFF = 0.03  # m: the pusher starts this far behind the contact point
ABOVE = 0.08  # m: the left's pre-grasp and the right's pre-push, back along the approach
STAGE_BACK = 0.10  # m: the left stages this far short of the cube's expected end, toward its base
STAGE_Z = 0.16  # m: the left's staging height
LIFT = 0.12  # m: the left lifts the cube this far
PARK = np.array([0.30, 0.50, 0.25])  # m: where the right's TCP rests after the push
NOISE_TAU = 20.0  # steps: correlation time of the joint noise
# Step schedule (50 Hz). Right: pre-push, down, push, back off, park. Left: stage, re-read, above, down,
# close, lift.
R_ABOVE, R_DOWN, R_PUSHED, R_DWELL, R_CENTRE, R_BACK, R_PARK = 60, 85, 172, 186, 194, 207, 238
L_STAGED, REREAD, L_ABOVE, L_DOWN, L_CLOSE, L_LIFT = 130, 208, 236, 262, 262, 277


@dataclass
class SoloKnobs:
    """How the solo pick deviates from its nominal tuning; defaults = nominal."""

    grasp_height: float = 0.013  # m, the left's TCP above the cube's centre at the grasp
    along_offset: float = 0.0  # m, grasp point shifted along the left's heading (away from its base)
    across_offset: float = 0.0  # m, grasp point shifted along the left's finger closing axis
    close_shift: int = 0  # steps the close command moves (< 0: during the descent; > 0: into the lift)
    squeeze: float = GRIPPER_CLOSED  # the closed gripper command (0 fully closed; ~0.6 touches the cube)
    lift_steps: int = 50  # steps of the lift (fewer: a faster, jerkier lift)
    push_fraction: float = 1.0  # share of the needed push distance the right pushes
    reread: bool = True  # False: the pick is planned on the cube pose read at the first step (stale)
    tilt: float = 0.0  # rad, the left's approach tilted from vertical to point away from its base
    joint_noise: float = 0.0  # rad, stationary std of smooth noise on every commanded arm joint
    seed: int = 0  # seeds the joint noise together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "grasp_height": -0.02 <= self.grasp_height <= 0.06,
            "close_shift": -(L_CLOSE - L_ABOVE) <= self.close_shift <= 60,
            "squeeze": 0.0 <= self.squeeze <= 1.0,
            "lift_steps": 1 <= self.lift_steps <= EPISODE_STEPS - L_LIFT,
            "push_fraction": 0.0 <= self.push_fraction <= 1.5,
            "tilt": 0.0 <= self.tilt <= np.pi / 2,
            "joint_noise": self.joint_noise >= 0,
        }
        refuse_invalid(self, checks)


# ------------------------------------------------------------------------------------------------- paths
def rot_log(R: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) (axis times angle, angle in [0, pi]) of the rotation matrix R."""
    cos = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    angle = float(np.arccos(cos))
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if angle < 1e-9:
        return 0.5 * w
    if np.pi - angle < 1e-6:  # half a turn: the axis is the eigenvector of R + I
        B = R + np.eye(3)
        axis = B[:, int(np.argmax(np.linalg.norm(B, axis=0)))]
        return angle * axis / np.linalg.norm(axis)
    return angle * w / (2 * np.sin(angle))


class Path:
    """TCP keyframes (step, position, rotation), joined by minimum-jerk segments; held after the last."""

    def __init__(self, t: int, pos: np.ndarray, rot: np.ndarray):
        self.keys = [(int(t), np.asarray(pos, dtype=float), np.asarray(rot, dtype=float))]

    def to(self, t: int, pos: np.ndarray, rot: np.ndarray) -> Path:
        if t <= self.keys[-1][0]:
            raise ValueError(f"keyframe at step {t} is not after the last one ({self.keys[-1][0]}).")
        self.keys.append((int(t), np.asarray(pos, dtype=float), np.asarray(rot, dtype=float)))
        return self

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """TCP position (3,) and rotation (3,3) at step t."""
        if t <= self.keys[0][0]:
            return self.keys[0][1], self.keys[0][2]
        for (t0, p0, R0), (t1, p1, R1) in zip(self.keys[:-1], self.keys[1:], strict=True):
            if t < t1:
                s = float(minimum_jerk((t - t0) / (t1 - t0)))
                return p0 + s * (p1 - p0), R0 @ rotvec_matrix(s * rot_log(R0.T @ R1))
        return self.keys[-1][1], self.keys[-1][2]

    def cut(self, t: int) -> Path:
        """A path that starts where this one is at step t (the later keyframes dropped)."""
        return Path(t, *self.at(t))


# -------------------------------------------------------------------------------------------- geometry
def push_line(cube: np.ndarray, fraction: float = 1.0) -> tuple[np.ndarray, np.ndarray] | None:
    """Unit push direction u (2,) and the cube's planned end (x, y), or None if the left reaches it as it is.

    u is the cube's face normal (of four) that points most toward -x; the end is where the line from the
    cube along u comes `PUSH_TO` from the left's base, `fraction` of the way there.
    """
    xy = cube[:2]
    rel = xy - LEFT_BASE[:2]
    if np.linalg.norm(rel) <= REACH:
        return None
    yaws = cube_yaw(cube[3:7]) + np.arange(4) * np.pi / 2
    normals = np.stack([np.cos(yaws), np.sin(yaws)], axis=1)
    u = normals[int(np.argmin(normals[:, 0]))]
    # |rel + s u| = PUSH_TO, the smaller s >= 0 (the first crossing into reach).
    b, c = rel @ u, rel @ rel - PUSH_TO**2
    disc = b * b - c
    s = -b - np.sqrt(disc) if disc > 0 else -b  # no crossing: push to the nearest point of the line
    return u, xy + fraction * max(s, 0.0) * u


def pusher_rot(u: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The right gripper top-down at `at`, heading away from its base, its closing axis along u."""
    heading = float(np.arctan2(at[1] - RIGHT_BASE[1], at[0] - RIGHT_BASE[0]))
    return gripper_rot(heading, np.pi / 2, top_down_roll(heading, float(np.arctan2(u[1], u[0]))))


def left_grasp(cube: np.ndarray, k: SoloKnobs) -> tuple[np.ndarray, np.ndarray]:
    """The left's grasp TCP position (3,) and rotation (3,3) on the cube pose (7,)."""
    heading = float(np.arctan2(cube[1] - LEFT_BASE[1], cube[0] - LEFT_BASE[0]))
    yaw = cube_yaw(cube[3:7])
    rolls = [top_down_roll(heading, yaw + j * np.pi / 2) for j in (0, 1)]
    roll = min(rolls, key=abs)  # the face pair nearer the unturned finger axis
    R = gripper_rot(heading, np.pi / 2 - k.tilt, roll)
    ahead = np.array([np.cos(heading), np.sin(heading), 0.0])
    pos = cube[:3] + k.along_offset * ahead + k.across_offset * R[:, 1] + [0.0, 0.0, k.grasp_height]
    return pos, R


# --------------------------------------------------------------------------------------------- episode
class SoloEpisode:
    """One episode: the right's push (if needed) and the left's pick, IK toward the paths every step."""

    def __init__(self, knobs: SoloKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        rng = episode_rng(knobs.seed, state, cube)
        self.noise = smooth_noise(rng, EPISODE_STEPS, 12, knobs.joint_noise, NOISE_TAU)
        self.q = {"left": state[:6].copy(), "right": state[7:13].copy()}  # IK warm starts
        self.push = push_line(cube, knobs.push_fraction)
        self.first = cube.copy()  # the cube pose read at the first step
        self.expected = cube.copy()  # where the cube should lie once the push is over
        if self.push is not None:
            self.expected[:2] = self.push[1]
        self.paths = {"right": self.right_path(cube), "left": self.stage_path()}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.picked_on: np.ndarray | None = None  # the cube pose the pick was planned on

    def right_path(self, cube: np.ndarray) -> Path | None:
        """Pre-push above, down, push, back off and up, park; None if no push is needed."""
        if self.push is None:
            return None
        u, end = self.push
        u3 = np.append(u, 0.0)
        start = np.append(cube[:2], PUSH_TIP_Z + TIP_BEYOND_TCP)  # straddling the cube, pads either side
        stop = np.append(end, start[2]) + (PAD_OPEN - CUBE_HALF + PUSH_LEAD) * u3  # trailing pad on the face
        R = pusher_rot(u, (start[:2] + stop[:2]) / 2)
        home = self.arms["right"].fk(self.q["right"])
        path = Path(0, *home).to(R_ABOVE, start + [0.0, 0.0, ABOVE], R).to(R_DOWN, start, R)
        centre = stop - (PAD_OPEN - CUBE_HALF + PUSH_LEAD) * u3  # both pads off the faces before it rises
        path = path.to(R_PUSHED, stop, R).to(R_DWELL, stop, R).to(R_CENTRE, centre, R)
        path = path.to(R_BACK, centre + [0.0, 0.0, ABOVE], R)
        return path.to(R_PARK, PARK, home[1])

    def stage_path(self) -> Path:
        """The left from its start pose to high above, short of where the cube is expected."""
        pos, R = left_grasp(self.expected, self.k)
        ahead = np.append(
            (self.expected[:2] - LEFT_BASE[:2]) / np.linalg.norm(self.expected[:2] - LEFT_BASE[:2]), 0
        )
        stage = np.array([*(pos - STAGE_BACK * ahead)[:2], STAGE_Z])
        return Path(0, *self.arms["left"].fk(self.q["left"])).to(L_STAGED, stage, R)

    def plan_pick(self, cube: np.ndarray) -> None:
        """From the staging pose: above the grasp, down, (close), lift straight up."""
        self.picked_on = cube.copy() if self.k.reread else self.first.copy()
        pos, R = left_grasp(self.picked_on, self.k)
        lift_end = L_LIFT + self.k.lift_steps
        path = self.paths["left"].cut(REREAD).to(L_ABOVE, pos - ABOVE * R[:, 0], R).to(L_DOWN, pos, R)
        self.paths["left"] = path.to(L_LIFT, pos, R).to(lift_end, pos + [0.0, 0.0, LIFT], R)

    def joints(self, side: str, t: int) -> np.ndarray:
        path, arm = self.paths[side], self.arms[side]
        if path is not None:
            pos, R = path.at(t)
            self.q[side], _ = arm.ik(pos, R, self.q[side], iters=30, tol=2e-4)
        noise = self.noise[min(t, EPISODE_STEPS - 1), :6] if side == "left" else self.noise[t, 6:]
        return np.clip(self.q[side] + noise, arm.lower, arm.upper)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        t = min(t, EPISODE_STEPS - 1)
        if t == REREAD:
            self.plan_pick(batch["observation.environment_state"][b][:7].astype(float))
        if t == L_CLOSE + self.k.close_shift:
            self.grip["left"] = self.k.squeeze
        q_left, q_right = self.joints("left", t), self.joints("right", t)
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.solo:make_policy` with `SoloKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(SoloKnobs, "solo", kwargs), SoloEpisode)


# Named settings for measure.py, as a user of such a controller would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "tilted": {"tilt": 1.0},
    "short_push": {"push_fraction": 0.2},
    "noisy_joints": {"joint_noise": 0.04},
    "offset_across": {"across_offset": 0.02},
    "no_push": {"push_fraction": 0.0},
    "stale_cube": {"reread": False},
    "weak_squeeze": {"squeeze": 0.6},
    "high_grasp": {"grasp_height": 0.05},
    "early_close": {"close_shift": -20},
}
