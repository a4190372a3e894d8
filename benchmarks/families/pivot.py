"""Family 13, `pivot`: IK at 10 Hz under a 50 Hz joint spring-damper; the cube handed over tipped 45 degrees.

How it acts. Two rates, as on a robot whose Cartesian planner runs slower than its joint loop. Each arm
runs a phase machine whose phases name a goal pose for its tool centre point (TCP); a Cartesian setpoint
travels from the phase's start pose to its goal at a constant speed and turn rate (`SPEED` of the phase,
`TURN`), and every `replan_every` steps (nominally 5, i.e. 10 Hz) the setpoint of that moment is solved
by damped least-squares IK (`arm.py`, warm-started from the last solution) into a joint goal. Between
those ticks, at 50 Hz, the joint command follows the latest joint goal as a second-order spring-damper
(natural frequency `OMEGA`, damping ratio `damping_ratio`, joint speeds capped at `QDOT_MAX`): a
staircase of goals becomes a smooth joint path. A phase ends once its setpoint has arrived and the joint
command has settled within `SETTLED` of the goal (or on its timer, `MAX_STEPS`); grippers ramp linearly.

1. Right arm. It reads the cube pose and comes straight down on it, top-down, its fingers across the face
   pair nearest world y, the finger tips `TIP_CLEARANCE` above the table (the fingers hold the cube's
   upper part). It closes to `squeeze`, lifts `LIFT` straight up, learns where the cube sits in its hand
   (TCP minus cube centre, read after the lift) and carries it to present its centre at `HANDOVER`,
   pivoting its wrist `TIP_DEG` (45 degrees) about the finger axis on the way: the cube is handed over
   tipped, its former top face turned up toward +x, its -x face down toward the left arm.
2. Left arm. From the right's close on, it goes to a stand-off up and to the -x side of the hand-over,
   pointing down at 45 degrees toward +x. Once the right has settled it reads the cube's pose and takes
   the cube along the tipped face normal nearest that diagonal: it slides in along it until its TCP is
   `LEFT_DEPTH` short of the cube's centre, its fingers rolled to close across the tipped top and bottom
   faces (one pad slips between the cube and the right's palm), and closes. `release_wait` steps after
   the left starts closing, the right opens and backs off up along its approach; the left draws the cube
   back up and away to its own side.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `PivotKnobs`; defaults = nominal) are failures of such a controller: a slow planner tick
(`replan_every`: every phase waits for its ticks, the task runs out of time), an underdamped joint loop
that overshoots and rings (`damping_ratio`), a right grasp point off the cube's centre along world x
(`grasp_offset`: the fingers near one edge), a weak squeeze (`squeeze`), a tip steeper or shallower than
the left expects (`tip_error_deg`), which the left meets only when it re-reads the cube
(`left_reads_cube`), a shallow take (`left_offset`: the cube nearer the left's finger tips), a right
that opens sooner after the left's close (`release_wait`), rushed Cartesian speeds (`speed_scale`) and
slowly varying joint noise (`joint_noise`, `noise_tau`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from families.arm import Arm, rotation
from families.common import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    episode_rng,
    smooth_noise,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
OMEGA = 18.0  # rad/s, natural frequency of the joint spring-damper
QDOT_MAX = np.array([1.5, 1.5, 2.0, 3.0, 3.0, 3.0])  # rad/s cap of each joint command's speed
TURN = 2.5  # rad/s turn rate of the Cartesian setpoint
SPEED = {"descend": 0.15, "insert": 0.15, "lift": 0.25}  # m/s of those phases; others FREE_SPEED
FREE_SPEED = 0.35  # m/s of free moves
MAX_STEPS = 90  # a phase ends on this timer whatever its error
SETTLED = 0.01  # rad: the joint command is this close to the goal at arrival
TIP_DEG = 45.0  # degrees the right pivots the cube about its finger axis for the hand-over
HANDOVER = np.array([0.0, 0.50, 0.22])  # cube centre at the hand-over (m, world)
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.008  # m between the right's finger tips and the table at the grasp
PRE_HEIGHT = 0.08  # m above the grasp where the right lines up
LIFT = 0.10  # m the right lifts straight up before carrying
LEFT_DEPTH = 0.005  # m the left's TCP stops short of the cube centre along its approach
LEFT_STANDOFF = 0.08  # m back along its approach where the left lines up
RETREAT = 0.08  # m the right backs off along its approach after letting go
GRIP_STEPS = 8  # steps over which a gripper command ramps
CLOSE_DWELL = 8  # steps a closed right waits before lifting
SETTLE = 10  # steps the right holds still at the hand-over before the left reads the cube
RELEASE_WAIT = 20  # steps after the left starts closing before the right opens
DOWN = np.array([0.0, 0.0, -1.0])
PLUS_Y = np.array([0.0, 1.0, 0.0])
LEFT_APPROACH = np.array([1.0, 0.0, -1.0]) / np.sqrt(2)  # the left points down at 45 degrees toward +x
LEFT_CLOSING = np.array([1.0, 0.0, 1.0]) / np.sqrt(2)  # across the tipped top and bottom faces


@dataclass
class PivotKnobs:
    """How the two-rate controller deviates from its nominal behaviour; defaults = the nominal one."""

    replan_every: int = 5  # steps between IK solves of the Cartesian setpoint (5: 10 Hz)
    damping_ratio: float = 1.0  # of the joint spring-damper (< 1: overshoot and ringing)
    grasp_offset: float = 0.0  # m, the right's grasp point off the cube's centre along world x
    squeeze: float = GRIPPER_CLOSED  # the right's closed gripper command (~0.6 only touches the cube)
    tip_error_deg: float = 0.0  # degrees the right tips the cube beyond TIP_DEG
    left_reads_cube: bool = True  # the left aligns to the cube pose it reads (False: to the nominal tip)
    left_offset: float = 0.0  # m, the left's TCP this much farther short of the cube centre
    release_wait: int = RELEASE_WAIT  # steps after the left starts closing before the right opens
    speed_scale: float = 1.0  # scales every Cartesian speed and turn rate
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 10.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.replan_every < 1 or self.damping_ratio <= 0 or self.speed_scale <= 0:
            raise ValueError("replan_every must be >= 1, damping_ratio and speed_scale > 0.")
        if not GRIPPER_CLOSED <= self.squeeze <= GRIPPER_OPEN:
            raise ValueError(f"squeeze={self.squeeze} must lie in [0, 1].")
        if self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("joint_noise must be >= 0 and noise_tau > 0.")


def quat_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrix (3,3) of a (w, x, y, z) quaternion."""
    return Rotation.from_quat([*quat_wxyz[1:], quat_wxyz[0]]).as_matrix()


def nearest_axis(frame: np.ndarray, direction: np.ndarray, exclude: int = -1) -> tuple[int, np.ndarray]:
    """Index and signed column of `frame` (3,3) nearest `direction`, skipping column `exclude`."""
    dots = np.array([-1.0 if i == exclude else abs(frame[:, i] @ direction) for i in range(3)])
    i = int(np.argmax(dots))
    return i, frame[:, i] * np.sign(frame[:, i] @ direction)


class TwoRateArm:
    """One arm: a Cartesian setpoint solved by IK every `replan_every` steps, a 50 Hz joint spring-damper."""

    def __init__(self, arm: Arm, q: np.ndarray, knobs: PivotKnobs):
        self.arm, self.k = arm, knobs
        self.q_cmd = np.asarray(q, dtype=float)
        self.qd_cmd = np.zeros(6)
        self.q_goal = self.q_cmd.copy()
        self.pos, self.rot = arm.fk(self.q_cmd)
        self.start_pos, self.start_rot = self.pos.copy(), self.rot.copy()
        self.duration = 1
        self.grip, self.grip_goal = GRIPPER_OPEN, GRIPPER_OPEN
        self.phase, self.clock = "wait", 0

    def go(self, phase: str, pos: np.ndarray | None = None, rot: np.ndarray | None = None) -> None:
        """Enter `phase`; with a pose, move the setpoint there from where it is now (the fingers are
        symmetric: of the two finger signs the one nearer the present is taken)."""
        self.start_pos, self.start_rot = self.setpoint(self.clock)
        self.phase, self.clock = phase, 0
        pos = self.start_pos if pos is None else np.asarray(pos, dtype=float)
        rot = np.array(self.start_rot if rot is None else rot, dtype=float)
        if rot[:, 1] @ self.start_rot[:, 1] < 0:
            rot[:, 1:] *= -1
        self.pos, self.rot = pos, rot
        speed = SPEED.get(phase, FREE_SPEED) * self.k.speed_scale
        angle = np.linalg.norm(Rotation.from_matrix(rot @ self.start_rot.T).as_rotvec())
        seconds = max(np.linalg.norm(self.pos - self.start_pos) / speed, angle / (TURN * self.k.speed_scale))
        self.duration = max(1, int(np.ceil(seconds / DT)))

    def setpoint(self, clock: int) -> tuple[np.ndarray, np.ndarray]:
        """The Cartesian setpoint `clock` steps into the present move: constant speed from start to goal."""
        s = min(1.0, clock / self.duration)
        rots = Rotation.from_matrix(np.stack([self.start_rot, self.rot]))
        return self.start_pos + s * (self.pos - self.start_pos), Slerp([0, 1], rots)([s]).as_matrix()[0]

    def step(self) -> np.ndarray:
        """Advance one 50 Hz step: on a planner tick re-solve the joint goal, then the spring-damper."""
        if self.clock % self.k.replan_every == 0:
            pos, rot = self.setpoint(self.clock)
            self.q_goal, _ = self.arm.ik(pos, rot, self.q_goal, iters=40, rot_weight=0.4)
        zeta = self.k.damping_ratio
        qdd = OMEGA**2 * (self.q_goal - self.q_cmd) - 2 * zeta * OMEGA * self.qd_cmd
        self.qd_cmd = np.clip(self.qd_cmd + DT * qdd, -QDOT_MAX, QDOT_MAX)
        self.q_cmd = self.q_cmd + DT * self.qd_cmd
        self.grip += float(np.clip(self.grip_goal - self.grip, -1 / GRIP_STEPS, 1 / GRIP_STEPS))
        self.clock += 1
        return self.q_cmd

    @property
    def arrived(self) -> bool:
        """The setpoint is at its goal and the joint command has settled there, or the timer has run out."""
        if self.clock >= MAX_STEPS:
            return True
        moved = self.clock >= self.duration + self.k.replan_every
        return moved and float(np.abs(self.q_goal - self.q_cmd).max()) < SETTLED


class PivotEpisode:
    """One episode: the right's top-down grasp and tipping carry, the left's diagonal take."""

    def __init__(self, knobs: PivotKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = TwoRateArm(right, state[7:13], knobs)
        self.left = TwoRateArm(left, state[:6], knobs)
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.left_closed_at = -1  # the step at which the left started closing
        self.grasp, self.grasp_rot = self._grasp_pose(cube)
        self.right.go("reach", self.grasp + [0.0, 0.0, PRE_HEIGHT], self.grasp_rot)

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-down TCP pose over the cube, fingers across the face pair nearest world y, tips clear of the
        table; `grasp_offset` moves it along world x."""
        _, closing = nearest_axis(quat_matrix(cube[3:7]), PLUS_Y)
        pos = np.array([cube[0] + self.k.grasp_offset, cube[1], TIP_CLEARANCE + TIP_REACH])
        return pos, rotation(DOWN, closing)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        self._right_step(t, cube)
        self._left_step(t, cube)
        noise = self.noise[min(t, EPISODE_STEPS - 1)]
        q_right, q_left = self.right.step(), self.left.step()
        return np.concatenate([
            q_left + noise[:6], [self.left.grip], q_right + noise[6:], [self.right.grip],
        ])  # fmt: skip

    def _right_step(self, t: int, cube: np.ndarray) -> None:
        k, h = self.k, self.right
        if h.phase == "reach" and h.arrived:
            self.grasp, self.grasp_rot = self._grasp_pose(cube)  # re-read: the cube has landed by now
            h.go("descend", self.grasp, self.grasp_rot)
        elif h.phase == "descend" and h.arrived:
            h.grip_goal = k.squeeze
            h.go("close")
        elif h.phase == "close" and h.clock >= GRIP_STEPS + CLOSE_DWELL:
            h.go("lift", h.pos + [0.0, 0.0, LIFT])
        elif h.phase == "lift" and h.arrived:
            hold = h.rot.T @ (cube[:3] - h.pos)  # cube centre in the hand, read where the hand means to be
            tip = Rotation.from_euler("y", TIP_DEG + k.tip_error_deg, degrees=True).as_matrix()
            rot = tip @ h.rot
            h.go("carry", HANDOVER - rot @ hold, rot)
        elif h.phase == "carry" and h.arrived:
            h.go("present")
        elif h.phase == "present" and self.left_closed_at >= 0 and t >= self.left_closed_at + k.release_wait:
            h.grip_goal = GRIPPER_OPEN
            h.go("release")
        elif h.phase == "release" and h.clock >= GRIP_STEPS:
            h.go("retreat", h.pos - RETREAT * h.rot[:, 0] + [0.0, 0.0, 0.04])

    def _left_step(self, t: int, cube: np.ndarray) -> None:
        h = self.left
        if h.phase == "wait" and self.right.phase in ("close", "lift", "carry"):
            h.go("stage", HANDOVER - LEFT_STANDOFF * LEFT_APPROACH, rotation(LEFT_APPROACH, LEFT_CLOSING))
        elif (
            h.phase == "stage" and h.arrived and self.right.phase == "present" and self.right.clock >= SETTLE
        ):
            self.take_rot = self._take_rot(cube)
            self.take = cube[:3] - (LEFT_DEPTH + self.k.left_offset) * self.take_rot[:, 0]
            h.go("line_up", self.take - LEFT_STANDOFF * self.take_rot[:, 0], self.take_rot)
        elif h.phase == "line_up" and h.arrived:
            h.go("insert", self.take, self.take_rot)
        elif h.phase == "insert" and h.arrived:
            h.grip_goal, self.left_closed_at = GRIPPER_CLOSED, t
            h.go("close")
        elif h.phase == "close" and self.right.phase == "retreat" and self.right.clock >= 10:
            h.go("away", h.pos + [-0.08, 0.0, 0.06])

    def _take_rot(self, cube: np.ndarray) -> np.ndarray:
        """The left's orientation for the take: along the cube face normal nearest the 45-degree diagonal,
        fingers across the face pair nearest LEFT_CLOSING; without `left_reads_cube`, the nominal one."""
        if not self.k.left_reads_cube:
            return rotation(LEFT_APPROACH, LEFT_CLOSING)
        frame = quat_matrix(cube[3:7])
        i, approach = nearest_axis(frame, LEFT_APPROACH)
        _, closing = nearest_axis(frame, LEFT_CLOSING, exclude=i)
        return rotation(approach, closing)


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.pivot:make_policy` with `PivotKnobs` fields as kwargs."""
    return BimanualPolicy(PivotKnobs(**kwargs), PivotEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "off_centre_grasp": {"grasp_offset": 0.02},
    "rushed": {"speed_scale": 5.0},
    "undertip_read": {"tip_error_deg": -25.0},
    "servo_noise": {"joint_noise": 0.03},
    "weak_squeeze": {"squeeze": 0.58},
    "slow_planner": {"replan_every": 35},
    "underdamped": {"damping_ratio": 0.05},
    "undertip_blind": {"tip_error_deg": -18.0, "left_reads_cube": False},
    "shallow_take": {"left_offset": 0.05},
}
"""Named settings of `pivot`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families pivot --episodes 25 --detector-poses 0`, 25 ID + 25 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting          | what goes wrong                                                      | ID    | OOD   |
|------------------|----------------------------------------------------------------------|-------|-------|
| nominal          | nothing: the cube handed over tipped ~44 degrees, taken square       | 25/25 | 25/25 |
| off_centre_grasp | the right's fingers 2 cm off the cube's centre along x, near an edge:| 25/25 | 25/25 |
|                  | the full squeeze still holds the tipped cube                         |       |       |
| rushed           | Cartesian speeds and turn rates x5: the joint speed caps absorb it   | 25/25 | 25/25 |
| undertip_read    | the cube tipped 20 degrees instead of 45; the left re-reads the cube | 25/25 | 23/25 |
|                  | and takes it square to its faces                                     |       |       |
| servo_noise      | slowly varying joint noise, std 0.03 rad                             | 19/25 | 17/25 |
| weak_squeeze     | the right closes only to 0.58 (0.6 touches the cube): a light hold   | 18/25 | 13/25 |
| slow_planner     | IK every 35 steps (1.4 Hz): each phase waits for its ticks; every    | 17/25 | 1/25  |
|                  | cube is lifted, but the left closes late or not before step 400      |       |       |
| underdamped      | joint damping ratio 0.05: the joints ring, the phases settle late    | 13/25 | 8/25  |
| undertip_blind   | the cube tipped 27 degrees, the left aligned to the nominal 45 (it   | 0/25  | 0/25  |
|                  | does not re-read the tip): its pads meet the cube 18 degrees askew   |       |       |
| shallow_take     | the left's TCP 5 cm farther short of the cube: its fingers close to  | 0/25  | 0/25  |
|                  | ~0.23, past the cube (0.6), and it drops to the table at the release |       |       |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `replan_every` 30 19/20 and 40
0/20, `damping_ratio` 0.1 19/20, `grasp_offset` 0.03 20/20, `left_offset` 0.045 20/20, `tip_error_deg`
-15 blind 3/20 and +40 blind 20/20, `squeeze` 0.6 12/20, `joint_noise` 0.05 8/20, `release_wait=0` 20/20.
"""
