"""Family 15, `field`: artificial potential fields descended through the Jacobian transpose; a crossed take
from below, released on a tug.

How it acts. There is no trajectory, no interpolated setpoint and no IK solve to a target. Each arm's phase
names a goal pose for its tool centre point (TCP), and the goal defines an artificial potential over the
arm's joint angles: an attractive well (quadratic within `WELL` of the goal, conic beyond it, so the pull is
bounded far away; the same on orientation), a soft wall that pushes the finger tips up once they are below
`table_margin` above the table (stiffness `BARRIER`, as stiff as the well), a repulsive keep-out sphere
(Khatib's 1/d barrier, `keepout` radius) between the arm's wrist (the gripper link's origin) and the other
arm's wrist, read from the other arm's measured joints, and a weak posture spring on the forearm roll.
Every control step the joint command takes `DESCENT_STEPS` steps down that potential by the Jacobian-
transpose rule: the Cartesian forces are mapped to joint torques by J^T (MuJoCo's own Jacobians of the
TCP, the tips and the wrist) and the joints move along the torques by the step length that is optimal
along that direction, times `step_gain`; the whole control step is capped at `QDOT_MAX` joint speed. The
command flows downhill toward the field's minimum and the hand travels on the gradient's curved path. A
phase ends when the command has come to rest in the field (joint steps below `REST` for `REST_STEPS`
steps) and the measured joints are within `SETTLED` of it, or on its timer (`MAX_STEPS`): a wall or a
keep-out that holds the hand off its goal is a rest too, and the phase goes on from there.

1. Right arm. It reads the cube pose and comes straight down on the cube, top-down, its wrist turned a
   quarter turn from its natural closing axis so that its fingers close across the face pair nearest
   world x (the cube's +x and -x faces), the finger tips `TIP_CLEARANCE` above the table. It closes to
   `squeeze`, lifts, learns where the cube sits in its hand (cube minus measured TCP, read after the lift)
   and carries the cube, still top-down, to present its centre at `HANDOVER`, 26 cm above the table centre.
2. Left arm. While the right carries, it waits below and to the -x side of the hand-over, pointing up at
   `LEFT_PITCH_DEG` (30) above horizontal toward +x, fingers closing along world y. Once the right has
   come to rest it reads the cube pose and comes up that diagonal until its TCP is `left_depth` short of
   the cube's centre (nominally on it), its pads on the cube's free y faces, its fingers crossed with the
   right's (which hold the x faces), and closes.
3. Release on a tug. Once the left's close has run (`GRIP_STEPS` + `CLOSE_DWELL` steps), the left pulls
   back down along its approach by `tug`. The right feels the pull in the cube pose alone: it watches the
   cube in its own hand (cube minus its measured TCP) against where it sat when the left began to close,
   and lets go once the cube has slipped `slip_threshold` in its fingers (the left has it), or `TUG_WAIT`
   steps after the tug began at the latest; it then rises straight up, and the left draws the cube down
   and away toward its own side.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `FieldKnobs`; defaults = nominal) are failures of such a controller: a descent step too short
(`step_gain`: the arms crawl toward the field's minimum and the episode runs out), the joint speed cap
raised (`speed_scale`: the servos lag far behind the command and the cube is shaken on the carry), a table
wall set too high (`table_margin`: the field's minimum lies above the goal, the right closes on the cube's
top edge), a keep-out sphere too large (`keepout`: the wrists push each other apart and the left comes to
rest short of the cube), a cube estimate biased along x (`cube_bias`: a finger lands on the cube), a weak
squeeze (`squeeze`), a shallow take by the left (`left_depth`), a tug of another length (`tug`), a right
that yields to no slip at all (`slip_threshold` 0: it lets go as the left starts to close) and slowly
varying noise on the joint commands (`joint_noise`, `noise_tau`).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from families.arm import Arm, rotation
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    episode_rng,
    smooth_noise,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
HANDOVER = np.array([0.0, 0.50, 0.26])  # cube centre at the hand-over (m, world): high above the centre
LEFT_PITCH_DEG = 30.0  # the left's approach points up this far above horizontal, toward +x
WELL = 0.05  # m (and rad / ROT_WEIGHT): radius of the quadratic part of the attractive well
ROT_WEIGHT = 0.3  # m of potential per rad of orientation error
BARRIER = 1.0  # stiffness of the table barrier on the finger tips, against the well's 1 (per m)
DESCENT_STEPS = 4  # Jacobian-transpose steps down the potential per control step
KEEPOUT_GAIN = 2e-3  # strength of the keep-out sphere around the other arm's wrist (m^2)
ROLL_SPRING = 0.05  # rad a step per rad of forearm roll: the weak posture spring toward roll 0
QDOT_MAX = 2.0  # rad/s, cap of the joint command's speed (the largest joint)
REST = 2e-4  # rad: a joint step below this is rest ...
REST_STEPS = 3  # ... for this many steps in a row
SETTLED = 0.03  # rad between the measured joints and the rested command at a phase's end
MAX_STEPS = 120  # a phase ends on this timer whatever its state
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.008  # m between the right's finger tips and the table at the grasp
PRE_HEIGHT = 0.08  # m above the grasp where the right lines up
LIFT = 0.08  # m the right lifts straight up before it carries
LEFT_STANDOFF = 0.10  # m back along its approach where the left waits
RETREAT = 0.10  # m the right rises after letting go
GRIP_STEPS = 8  # steps over which a gripper command ramps
CLOSE_DWELL = 8  # steps a closed gripper waits before its arm moves on
SETTLE = 8  # steps the right holds still at the hand-over before the left reads the cube
TUG_WAIT = 40  # steps after the tug began at which the right lets go whatever it feels
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
PLUS_X = np.array([1.0, 0.0, 0.0])
PLUS_Y = np.array([0.0, 1.0, 0.0])
TABLE_CUBE = np.array([0.1, 0.5, CUBE_HALF, 1.0, 0.0, 0.0, 0.0])  # assumed where no finite pose is read
LEFT_APPROACH = np.array([np.cos(np.radians(LEFT_PITCH_DEG)), 0.0, np.sin(np.radians(LEFT_PITCH_DEG))])


@dataclass
class FieldKnobs:
    """How the potential-field controller deviates from its nominal behaviour; defaults = nominal."""

    step_gain: float = 1.0  # multiplies the optimal Jacobian-transpose step length (> 1: overshoot)
    speed_scale: float = 1.0  # scales the joint speed cap QDOT_MAX
    table_margin: float = TIP_CLEARANCE  # m above the table below which the barrier pushes the tips up
    keepout: float = 0.15  # m, radius of the keep-out sphere around the other arm's wrist
    cube_bias: float = 0.0  # m, the cube estimate's bias along world x (for the right's grasp)
    squeeze: float = GRIPPER_CLOSED  # the right's closed gripper command (~0.6 only touches the cube)
    left_depth: float = 0.0  # m the left's TCP stops short of the cube's centre along its approach
    tug: float = 0.03  # m the left pulls back along its approach after its close
    slip_threshold: float = 0.004  # m the cube must slip in the right's hand before the right lets go
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 10.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if not 0 < self.step_gain < 2 or self.speed_scale <= 0:
            raise ValueError("step_gain must lie in (0, 2) and speed_scale be > 0.")
        if min(self.table_margin, self.keepout, self.slip_threshold, self.tug) < 0:
            raise ValueError("table_margin, keepout, slip_threshold and tug must be >= 0.")
        if not GRIPPER_CLOSED <= self.squeeze <= GRIPPER_OPEN:
            raise ValueError(f"squeeze={self.squeeze} must lie in [0, 1].")
        if self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("joint_noise must be >= 0 and noise_tau > 0.")


def quat_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrix (3,3) of a (w, x, y, z) quaternion; the identity for a degenerate one."""
    q = np.asarray(quat_wxyz, dtype=float)
    if not np.all(np.isfinite(q)) or np.linalg.norm(q) < 1e-6:
        return np.eye(3)
    return Rotation.from_quat([*q[1:], q[0]]).as_matrix()


def nearest_face(cube_rot: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The cube's face normal nearest `direction` (of the six, signed)."""
    normals = [s * cube_rot[:, i] for i in range(3) for s in (1.0, -1.0)]
    return max(normals, key=lambda n: n @ direction)


def level_closing(cube_rot: np.ndarray, direction: np.ndarray, approach: np.ndarray) -> np.ndarray:
    """A closing axis square to `approach`: the cube face normal nearest `direction`, made orthogonal to
    the approach; `direction` itself if that normal lies (nearly) along the approach (a tipped cube)."""
    c = nearest_face(cube_rot, direction)
    c = c - approach * (approach @ c)
    if np.linalg.norm(c) < 0.3:
        c = direction - approach * (approach @ direction)
    return c / np.linalg.norm(c)


def clean_cube(cube: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """The cube pose (7,) read, or `fallback` (7,) where the reading is not finite."""
    cube = np.asarray(cube, dtype=float)
    return cube if cube.shape == (7,) and np.all(np.isfinite(cube)) else np.asarray(fallback, dtype=float)


def well(error: np.ndarray, radius: float) -> np.ndarray:
    """Force of the attractive well: the error itself within `radius`, of length `radius` beyond it."""
    n = float(np.linalg.norm(error))
    return error if n <= radius else error * (radius / n)


class FieldArm:
    """One arm: its joint command flows down an artificial potential by Jacobian-transpose steps."""

    def __init__(self, arm: Arm, q: np.ndarray, knobs: FieldKnobs):
        self.arm, self.k = arm, knobs
        self.q_cmd = np.clip(np.asarray(q, dtype=float), arm.lower, arm.upper)
        self.goal_pos, self.goal_rot = arm.fk(self.q_cmd)
        self.model, self.data = arm.model, arm.data
        self.wrist_body = arm.body
        self.jacp, self.jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        self.jacw, self.jact = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        self.grip, self.grip_goal = GRIPPER_OPEN, GRIPPER_OPEN
        self.phase, self.clock, self.rest = "wait", 0, 0
        self.last_step = np.inf
        self.other_wrist: np.ndarray | None = None

    def go(self, phase: str, pos: np.ndarray | None = None, rot: np.ndarray | None = None) -> None:
        """Enter `phase`; with a pose, that pose becomes the field's goal (of the two finger signs of `rot`
        the one nearer the present goal is taken: the fingers are symmetric)."""
        self.phase, self.clock, self.rest = phase, 0, 0
        if pos is not None:
            self.goal_pos = np.asarray(pos, dtype=float)
        if rot is not None:
            rot = np.array(rot, dtype=float)
            if rot[:, 1] @ self.goal_rot[:, 1] < 0:
                rot[:, 1:] *= -1
            self.goal_rot = rot

    def _forces(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stacked Cartesian forces (12,) and their Jacobian (12,6) at joint angles `q`: the attractive well
        on the TCP (position, orientation), the table wall on the finger tips, the keep-out on the wrist."""
        pos, R = self.arm.fk(q)
        e_rot = Rotation.from_matrix(self.goal_rot @ R.T).as_rotvec()
        f_pos = well(self.goal_pos - pos, WELL)
        f_rot = well(ROT_WEIGHT * e_rot, WELL)
        tips = pos + TIP_REACH * R[:, 0]
        f_tips = np.array([0.0, 0.0, BARRIER * max(self.k.table_margin - tips[2], 0.0)])  # a soft wall
        wrist = self.data.xpos[self.wrist_body].copy()
        f_wrist = np.zeros(3)
        if self.other_wrist is not None and self.k.keepout > 0:  # Khatib's 1/2 eta (1/d - 1/d0)^2
            away = wrist - self.other_wrist
            d = max(float(np.linalg.norm(away)), 1e-3)
            if d < self.k.keepout:
                f_wrist = well(KEEPOUT_GAIN * (1 / d - 1 / self.k.keepout) / d**2 * away / d, 2 * WELL)
        mujoco.mj_comPos(self.model, self.data)
        mujoco.mj_jac(self.model, self.data, self.jacp, self.jacr, pos, self.wrist_body)
        mujoco.mj_jac(self.model, self.data, self.jact, None, tips, self.wrist_body)
        mujoco.mj_jac(self.model, self.data, self.jacw, None, wrist, self.wrist_body)
        i = self.arm.dof_idx
        J = np.concatenate([self.jacp[:, i], ROT_WEIGHT * self.jacr[:, i], self.jact[:, i], self.jacw[:, i]])
        return np.concatenate([f_pos, f_rot, f_tips, f_wrist]), J

    def step(self, other_wrist: np.ndarray | None) -> np.ndarray:
        """One control step: `descent_steps` Jacobian-transpose steps down the potential, speed-capped."""
        self.other_wrist = other_wrist
        q = self.q_cmd.copy()
        for _ in range(DESCENT_STEPS):
            f, J = self._forces(q)
            tau = J.T @ f  # the forces as joint torques: minus the potential's gradient
            jt = J @ tau
            denom = float(jt @ jt)
            alpha = float(f @ jt) / denom if denom > 1e-12 else 0.0  # optimal step along tau
            dq = self.k.step_gain * alpha * tau
            dq[3] -= ROLL_SPRING * q[3]  # posture spring on the weak forearm roll
            q = np.clip(q + dq, self.arm.lower, self.arm.upper)
        step = q - self.q_cmd
        cap = QDOT_MAX * self.k.speed_scale * DT
        biggest = float(np.max(np.abs(step)))
        if biggest > cap:
            step *= cap / biggest
        if not np.all(np.isfinite(step)):
            step = np.zeros(6)
        self.q_cmd = self.q_cmd + step
        self.last_step = float(np.max(np.abs(step)))
        self.rest = self.rest + 1 if self.last_step < REST else 0
        self.grip += float(np.clip(self.grip_goal - self.grip, -1 / GRIP_STEPS, 1 / GRIP_STEPS))
        self.clock += 1
        return self.q_cmd

    def at_rest(self, q_measured: np.ndarray) -> bool:
        """The command rests in the field and the measured joints have caught up, or the timer ran out."""
        if self.clock >= MAX_STEPS:
            return True
        return self.rest >= REST_STEPS and float(np.max(np.abs(q_measured - self.q_cmd))) < SETTLED

    def tcp(self, q: np.ndarray) -> np.ndarray:
        """TCP position (3,) at joint angles `q`."""
        return self.arm.fk(q)[0]

    def wrist(self, q: np.ndarray) -> np.ndarray:
        """Wrist (gripper link origin) position (3,) at joint angles `q`."""
        self.arm.fk(q)
        return self.data.xpos[self.wrist_body].copy()


class FieldEpisode:
    """One episode: the right's top-down x-face grasp, the left's crossed take from below, the tug."""

    def __init__(self, knobs: FieldKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        rng = episode_rng(knobs.seed, state, cube)
        state = np.nan_to_num(state)
        cube = clean_cube(cube, TABLE_CUBE)
        self.cube = cube  # the last finite cube reading
        self.right = FieldArm(right, state[7:13], knobs)
        self.left = FieldArm(left, state[:6], knobs)
        self.noise = smooth_noise(rng, EPISODE_STEPS + 1, 12, knobs.joint_noise, knobs.noise_tau)
        self.hold = np.zeros(3)  # cube centre minus the right's TCP, read after the lift
        self.reference: np.ndarray | None = None  # cube in the right's hand when the left began to close
        self.slip = 0.0  # m the cube has slipped in the right's hand since then
        self.t = 0
        self.right.go("hover", *self._pre_grasp(cube))

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-down TCP pose on the (biased) cube estimate, fingers across the face pair nearest world x."""
        closing = level_closing(quat_matrix(cube[3:7]), PLUS_X, DOWN)
        pos = np.array([cube[0] + self.k.cube_bias, cube[1], TIP_CLEARANCE + TIP_REACH])
        return pos, rotation(DOWN, closing)

    def _pre_grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos, rot = self._grasp_pose(cube)
        return pos + PRE_HEIGHT * UP, rot

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        """Both arms' command (14,) at step `t`, from the cube pose and the measured joints now."""
        cube = self.cube = clean_cube(batch["observation.environment_state"][b][:7], self.cube)
        state = np.nan_to_num(batch["observation.state"][b].astype(float))
        self.t = t
        self._right_step(cube, state)
        self._left_step(cube, state)
        q_left = self.left.step(self.right.wrist(state[7:13]))
        q_right = self.right.step(self.left.wrist(state[:6]))
        noise = self.noise[min(t, EPISODE_STEPS)]
        return np.concatenate([q_left + noise[:6], [self.left.grip], q_right + noise[6:], [self.right.grip]])

    def _in_hand(self, cube: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Cube centre minus the right's measured TCP (world axes)."""
        return cube[:3] - self.right.tcp(state[7:13])

    def _right_step(self, cube: np.ndarray, state: np.ndarray) -> None:
        h, measured = self.right, state[7:13]
        if h.phase == "hover" and h.at_rest(measured):
            h.go("descend", *self._grasp_pose(cube))  # re-read: the cube has landed by now
        elif h.phase == "descend" and h.at_rest(measured):
            h.grip_goal = self.k.squeeze
            h.go("close")
        elif h.phase == "close" and h.clock >= GRIP_STEPS + CLOSE_DWELL:
            h.go("lift", h.goal_pos + LIFT * UP)
        elif h.phase == "lift" and h.at_rest(measured):
            self.hold = self._in_hand(cube, state)
            h.go("carry", HANDOVER - self.hold)
        elif h.phase == "carry" and h.at_rest(measured):
            h.go("present")
        elif h.phase == "present" and self.reference is not None:
            self.slip = float(np.linalg.norm(self._in_hand(cube, state) - self.reference))
            tugging = self.left.phase == "tug"
            if (tugging and self.left.clock >= TUG_WAIT) or self.slip >= self.k.slip_threshold:
                h.grip_goal = GRIPPER_OPEN
                h.go("release")
        elif h.phase == "release" and h.clock >= GRIP_STEPS:
            h.go("retreat", h.goal_pos + RETREAT * UP)

    def _left_step(self, cube: np.ndarray, state: np.ndarray) -> None:
        h, measured = self.left, state[:6]
        if h.phase == "wait" and self.right.phase in ("lift", "carry"):
            h.go("stage", *self._take_pose(HANDOVER, LEFT_STANDOFF))
        elif h.phase == "stage" and self.right.phase == "present" and self.right.clock >= SETTLE:
            if h.at_rest(measured):  # re-read: the cube where the right presents it
                h.go("insert", *self._take_pose(cube, self.k.left_depth))
        elif h.phase == "insert" and h.at_rest(measured):
            h.grip_goal = GRIPPER_CLOSED
            self.reference = self._in_hand(cube, state)
            h.go("close")
        elif h.phase == "close" and h.clock >= GRIP_STEPS + CLOSE_DWELL:
            h.go("tug", h.goal_pos - self.k.tug * h.goal_rot[:, 0])
        elif h.phase == "tug" and self.right.phase == "retreat":
            h.go("away", h.goal_pos - 0.06 * h.goal_rot[:, 0] + [-0.04, 0.0, 0.0])

    @staticmethod
    def _take_pose(cube: np.ndarray, depth: float) -> tuple[np.ndarray, np.ndarray]:
        """The left's TCP pose on the diagonal from below: `depth` short of the cube's centre, pointing up
        at LEFT_PITCH_DEG toward +x, fingers across the cube's face pair nearest world y."""
        centre = np.asarray(cube[:3], dtype=float)
        cube_rot = quat_matrix(cube[3:7]) if len(cube) >= 7 else np.eye(3)
        closing = level_closing(cube_rot, PLUS_Y, LEFT_APPROACH)
        return centre - depth * LEFT_APPROACH, rotation(LEFT_APPROACH, closing)


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.field:make_policy` with `FieldKnobs` fields as kwargs."""
    return BimanualPolicy(FieldKnobs(**kwargs), FieldEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "eager_release": {"slip_threshold": 0.0},
    "shallow_take": {"left_depth": 0.045},
    "wide_keepout": {"keepout": 0.5},
    "high_margin": {"table_margin": 0.07},
    "noisy_joints": {"joint_noise": 0.04},
    "rushed": {"speed_scale": 5.0},
    "timid_descent": {"step_gain": 0.05},
    "biased_cube": {"cube_bias": 0.035},
    "weak_squeeze": {"squeeze": 0.57},
}
"""Named settings of `field`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families field --episodes 25 --detector-poses 0`, 25 ID + 25 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting       | what goes wrong                                                         | ID    | OOD   |
|---------------|-------------------------------------------------------------------------|-------|-------|
| nominal       | nothing: x faces grasped top-down, taken from below on the y faces      | 25/25 | 25/25 |
| eager_release | the right yields to no slip at all and opens as the left starts to      | 25/25 | 25/25 |
|               | close: the left's fingers are already around the cube and catch it      |       |       |
| shallow_take  | the left rests 4.5 cm short of the cube's centre: only its finger tips  | 25/25 | 25/25 |
|               | reach the cube, enough to touch and hold it                             |       |       |
| wide_keepout  | keep-out radius 0.5 m: the wrists push each other apart, the cube is    | 19/25 | 14/25 |
|               | presented 3 cm higher and the left rests ~5.5 cm short of it            |       |       |
| high_margin   | the table wall starts 7 cm up: the field's minimum holds the right's    | 15/25 | 14/25 |
|               | TCP 3 cm above its goal, the fingers close on the cube's top edge       |       |       |
| rushed        | joint speed cap x5: every cube is lifted, many are shaken loose on the  | 14/25 | 14/25 |
|               | fast carry before the left touches them                                 |       |       |
| noisy_joints  | slowly varying noise, std 0.04 rad, on every arm joint command          | 12/25 | 8/25  |
| biased_cube   | the cube estimate 3.5 cm off along x: a finger lands on the cube        | 2/25  | 4/25  |
| weak_squeeze  | the right closes only to 0.57 (0.6 touches the cube): a few cubes are   | 0/25  | 4/25  |
|               | never lifted, the others slip out on the carry                          |       |       |
| timid_descent | descent steps 0.05 of the optimal length: the arms crawl, the right     | 0/25  | 0/25  |
|               | closes near step 240 and the cube never reaches the hand-over in time   |       |       |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `keepout` 0.4 20/20, `table_margin`
0.04 20/20 and 0.09 1/20, `joint_noise` 0.03 16/20 and 0.06 1/20, `speed_scale` 3 18/20 and 4.5 15/20,
`step_gain` 0.1 16/20 and 0.03 0/20, 1.8 20/20, `cube_bias` 0.02 20/20 and 0.028 2/20, `squeeze` 0.5 19/20
and 0.55 4/20, `left_depth` 0.035 20/20 and 0.055 18/20, `tug` 0.15 20/20, `tug` 0.15 with
`slip_threshold` 1.0 (the right lets go on its timer only) 20/20. Reward 4 needs only a left finger on the
lifted cube, so a take that touches at all succeeds, whatever happens after it.
"""
