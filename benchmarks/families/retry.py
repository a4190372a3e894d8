"""Family 6, `retry`: a joint-filtered setpoint controller that checks its grasp and tries again.

How it acts. Each arm runs a state machine whose phases set a target pose for its tool centre point (TCP).
A Cartesian setpoint walks straight toward the target at a capped speed and turn rate (no gain: a constant
velocity, then a dead stop); every step one damped least-squares IK solve (`arm.py`) turns the setpoint
into joint angles, and the joint command follows those through a first-order low-pass (`filter_gain` of
the remaining joint error per step, capped at `JOINT_STEP`). A phase ends when the setpoint has reached
its target and the measured TCP (forward kinematics of the reported joints) is within `ARRIVE` of it, or
`SETTLE` steps later at most.

1. Right arm, up to `max_attempts` tries. It reads the cube pose, lines up `STANDOFF` back along a steep
   approach (pitch `GRASP_PITCH_DEG`, or steeper where the wrist would have to roll, heading along the
   cube face normal nearest its reach), comes down on the cube with its fingers across the two faces
   square to that heading, low on the cube, closes, and lifts `CHECK_LIFT`. Then it checks, from the cube
   pose alone, whether the cube rose at least `check_rise` with it. If not, it opens, backs up, measures
   how far its TCP was at the close from where it should have been relative to the cube (the miss), adds
   that to a correction, re-reads the cube pose and tries again from the top.
2. Carry. Holding, it carries the cube high to the left arm's side (`HANDOVER`) while pitching its wrist
   up by a quarter turn about the finger axis: it presents the cube tipped over, approach pointing up and
   to the left, so that the cube's former top and bottom faces now face +x and -x.
3. Left arm, up to two tries. It hovers top-down over the cube, comes down on it with its fingers across
   those two free faces (one slips into the gap between the cube and the right palm), closes, and checks
   its own take from proprioception: fingers stopped by the cube read ~0.6 open, fingers that closed on
   air read ~0. A miss: it opens, rises, corrects by the measured miss and comes down again. Once the take
   holds, the right hand opens and backs off along its approach, and the left lifts the cube away.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `RetryKnobs`; defaults = nominal) are failures of such a controller: a biased grasp point (a
miscalibrated cube estimate), a grasp check with a wrong threshold (passes a cube left on the table, or
never passes), one try only, a retry that re-aims from the stale first reading or without its
correction, a lagging joint filter, a left take point off, one left try only, a pause at the hand-over,
and servo noise on the joints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    RIGHT_BASE,
    BimanualPolicy,
    cube_yaw,
    episode_rng,
    gripper_rot,
    smooth_noise,
    wrap_half_pi,
    wrap_pi,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
GRASP_PITCH_DEG = (70.0, 75.0, 80.0, 85.0, 90.0)  # right approach pitches tried in turn: the first reachable
HANDOVER = np.array([-0.10, 0.50, 0.28])  # where the right hand presents the cube centre (m, world)
RIGHT_DEPTH = 0.014  # m from the right TCP to the cube centre along the approach: tips 6 mm above the table
LEFT_DEPTH = 0.006  # m from the left TCP down to the cube centre: the left tips just past its lower face
STANDOFF = 0.07  # m back along the approach where the right hand lines up before coming down
HOVER = 0.08  # m above its take point where the left hand lines up before coming down
CHECK_LIFT = 0.05  # m the right hand lifts before it checks the cube came with it
BACKOFF = 0.06  # m the right hand rises after a failed try, before it re-plans
SPEED, FINE_SPEED, CARRY_SPEED = 0.45, 0.12, 0.35  # m/s caps of the setpoint: free, onto the cube, carry
TURN = 2.5  # rad/s cap of the setpoint's turn
GRIP_STEPS = 8  # steps over which a gripper closes or opens
CLOSE_DWELL = 8  # steps a hand waits, closed, before it moves on
HELD_OPENING = 0.3  # normalized finger position above which a closed gripper has the cube between its pads
JOINT_STEP = 0.12  # rad, the most a joint command moves in one step
IK_TOLERANCE = 0.01  # m (+ 0.3 m/rad): a grasp pose the IK reaches within this is reachable
ARRIVE = 0.008  # m: a phase ends when the measured TCP is this close to its target ...
SETTLE = 25  # ... or this many steps after the setpoint reached it
HOME = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])  # the arms' start pose (gym-aloha's)


@dataclass
class RetryKnobs:
    """How the retrying controller deviates from its nominal behaviour; the defaults are the nominal one."""

    grasp_offset_x: float = 0.0  # m, bias of the right grasp point along world x (a miscalibrated estimate)
    grasp_offset_y: float = 0.0  # m, the same along world y (the right fingers' closing axis)
    check_rise: float = 0.03  # m the cube must have risen for the grasp check to pass (< 0: always passes)
    max_attempts: int = 3  # right grasp tries before it carries whatever it holds
    correct_miss: bool = True  # a retry adds the miss measured at the last close to its aim
    stale_replan: bool = False  # a retry re-plans from the cube pose read at the first try, not the present
    filter_gain: float = 0.5  # fraction of the joint error the command moves per step (low: a lagging arm)
    left_offset_x: float = 0.0  # m, bias of the left take point along world x (its closing axis)
    left_offset_z: float = 0.0  # m, bias of the left take point along world z (+ = higher, a shallow pinch)
    left_attempts: int = 2  # left take tries
    handover_pause: int = 0  # steps the right hand holds still at the hand-over before the left may come
    joint_noise: float = 0.0  # rad, std of noise on every arm joint command
    noise_tau: float = 5.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.left_attempts < 1:
            raise ValueError(
                f"max_attempts={self.max_attempts} and left_attempts={self.left_attempts} must be >= 1."
            )
        if not 0.0 < self.filter_gain <= 1.0:
            raise ValueError(f"filter_gain={self.filter_gain} must be in (0, 1] (1 = no filter).")
        if self.handover_pause < 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError(
                f"handover_pause={self.handover_pause} and joint_noise={self.joint_noise} must be >= 0, "
                f"noise_tau={self.noise_tau} > 0."
            )


class Setpoint:
    """One arm: a Cartesian setpoint walked toward a target, IK per step, joints low-passed, and a phase."""

    def __init__(self, arm: Arm, q: np.ndarray, gain: float):
        self.arm, self.gain = arm, gain
        self.q_ik = np.asarray(q, dtype=float)  # IK solution of the setpoint (warm start of the next)
        self.q = self.q_ik.copy()  # low-passed joint command
        self.pos, self.rot = arm.fk(self.q)
        self.measured = self.pos.copy()
        self.target, self.target_rot, self.speed = self.pos.copy(), self.rot.copy(), SPEED
        self.grip = GRIPPER_OPEN
        self.phase, self.clock, self.reached = "wait", 0, -1

    def go(self, phase: str, pos: np.ndarray | None = None, rot: np.ndarray | None = None,
           speed: float = SPEED) -> None:  # fmt: skip
        """Enter `phase`; with a pose, walk the setpoint there at `speed` (m/s)."""
        self.phase, self.clock, self.reached = phase, 0, -1
        if pos is not None:
            self.target = np.asarray(pos, dtype=float)
            self.target_rot = self.rot if rot is None else rot
            self.speed = speed

    def step(self, q_measured: np.ndarray) -> None:
        """Advance the setpoint one step, solve IK for it, low-pass the joints toward the solution."""
        self.clock += 1
        self.measured, _ = self.arm.fk(np.asarray(q_measured, dtype=float))
        dp = self.target - self.pos
        n = float(np.linalg.norm(dp))
        self.pos = self.target.copy() if n <= self.speed * DT else self.pos + dp * (self.speed * DT / n)
        turn = Rotation.from_matrix(self.target_rot @ self.rot.T).as_rotvec()
        angle = float(np.linalg.norm(turn))
        if angle > TURN * DT:
            turn *= TURN * DT / angle
        self.rot = Rotation.from_rotvec(turn).as_matrix() @ self.rot
        if self.reached < 0 and n <= self.speed * DT and angle <= TURN * DT:
            self.reached = self.clock
        self.q_ik, _ = self.arm.ik(self.pos, self.rot, self.q_ik, iters=10)
        self.q = self.q + np.clip(self.gain * (self.q_ik - self.q), -JOINT_STEP, JOINT_STEP)

    @property
    def arrived(self) -> bool:
        """The setpoint is at its target and the measured TCP too (or has had SETTLE steps)."""
        if self.reached < 0:
            return False
        near = np.linalg.norm(self.measured - self.target) < ARRIVE
        return near or self.clock >= self.reached + SETTLE


class RetryEpisode:
    """One episode: the two arms' state machines with their grasp checks, stepped on every observation."""

    def __init__(self, knobs: RetryKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Setpoint(right, state[7:13], knobs.filter_gain)
        self.left = Setpoint(left, state[:6], knobs.filter_gain)
        self.attempt, self.left_attempt = 1, 1
        self.correction, self.left_correction = np.zeros(3), np.zeros(3)
        self.first_cube: np.ndarray | None = None  # the cube pose the first try came down on
        # Cube and measured TCP at the last close of either hand (the right's tries end before the left's).
        self.close_cube, self.close_tcp = np.zeros(3), np.zeros(3)
        self.hold = np.array([RIGHT_DEPTH, 0.0, 0.0])  # cube centre in the right gripper frame
        self.release = False  # the left take holds (or has run out of tries): the right may let go
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.grasp_rot = np.eye(3)
        self._approach(cube)

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Right TCP pose at the grasp: steep, heading along the face normal nearest the reach.

        The fingers close across the two faces square to that heading, low on the cube; the pitch is the
        shallowest of GRASP_PITCH_DEG the wrist reaches without rolling the forearm.
        """
        reach = np.arctan2(cube[1] - RIGHT_BASE[1], cube[0] - RIGHT_BASE[0])
        yaw = cube_yaw(cube[3:7])
        heading = reach + wrap_half_pi(yaw - reach + np.pi / 4) - np.pi / 4  # nearest face normal (mod pi/2)
        bias = np.array([self.k.grasp_offset_x, self.k.grasp_offset_y, 0.0])
        centre = np.array([cube[0], cube[1], CUBE_HALF]) + bias + self.correction
        for pitch in GRASP_PITCH_DEG:
            rot = gripper_rot(heading, np.radians(pitch), 0.0)
            pos = centre - RIGHT_DEPTH * rot[:, 0]
            q, err = self.right.arm.ik(pos, rot, HOME, iters=100)
            if err < IK_TOLERANCE and abs(q[3]) < 0.5:
                break
        return pos, rot

    def _approach(self, cube: np.ndarray) -> None:
        pos, rot = self._grasp_pose(cube)
        self.right.go("approach", pos - STANDOFF * rot[:, 0], rot)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        self.right.step(state[7:13])
        self.left.step(state[:6])
        self._right_step(cube)
        self._left_step(cube, state[6])
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left.grip], self.right.q + noise[6:], [self.right.grip],
        ])  # fmt: skip

    def _right_step(self, cube: np.ndarray) -> None:
        k, h = self.k, self.right
        if h.phase == "approach" and h.arrived:
            if self.first_cube is None:
                self.first_cube = cube.copy()
            seen = self.first_cube if k.stale_replan else cube  # the cube has landed by now
            pos, self.grasp_rot = self._grasp_pose(seen)
            h.go("descend", pos, self.grasp_rot, FINE_SPEED)
        elif h.phase == "descend" and h.arrived:
            self.close_cube, self.close_tcp = cube[:3].copy(), h.measured.copy()
            h.go("close")
        elif h.phase == "close":
            h.grip = GRIPPER_OPEN + (GRIPPER_CLOSED - GRIPPER_OPEN) * min(1.0, h.clock / GRIP_STEPS)
            if h.clock >= GRIP_STEPS + CLOSE_DWELL:
                h.go("lift", h.pos + [0.0, 0.0, CHECK_LIFT], speed=FINE_SPEED)
        elif h.phase == "lift" and h.arrived:
            if cube[2] - CUBE_HALF >= k.check_rise or self.attempt >= k.max_attempts:
                hold = h.rot.T @ (cube[:3] - h.measured)  # where the cube sits in the hand
                self.hold = hold if np.linalg.norm(hold - self.hold) < 0.03 else self.hold
                present = gripper_rot(np.arctan2(h.rot[1, 0], h.rot[0, 0]), self._pitch() - np.pi / 2, 0.0)
                h.go("carry", HANDOVER - present @ self.hold, present, CARRY_SPEED)
            else:
                h.go("reopen")
        elif h.phase == "reopen":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / GRIP_STEPS)
            if h.clock >= GRIP_STEPS:
                if k.correct_miss:  # where the TCP should have closed (from the cube) minus where it did
                    miss = self.close_cube - RIGHT_DEPTH * self.grasp_rot[:, 0] - self.close_tcp
                    self.correction[:2] += miss[:2]
                h.go("backoff", h.pos + [0.0, 0.0, BACKOFF])
        elif h.phase == "backoff" and h.arrived:
            self.attempt += 1
            self._approach(self.first_cube if k.stale_replan else cube)
        elif h.phase == "carry" and h.arrived:
            h.go("present")
        elif h.phase == "present" and self.release:
            h.go("release")
        elif h.phase == "release":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / GRIP_STEPS)
            if h.clock >= GRIP_STEPS:
                h.go("retreat", h.pos - 0.08 * h.rot[:, 0])

    def _pitch(self) -> float:
        """Pitch (rad below horizontal) of the right approach as it was at the grasp."""
        return float(np.arcsin(np.clip(-self.grasp_rot[2, 0], -1.0, 1.0)))

    def _left_rot(self) -> np.ndarray:
        """Top-down, fingers closing along the right approach's heading: on the tipped cube's free faces."""
        heading = np.arctan2(self.grasp_rot[1, 0], self.grasp_rot[0, 0])
        return gripper_rot(0.0, np.pi / 2, wrap_pi(np.pi / 2 - heading))

    def _take_pose(self, cube: np.ndarray) -> np.ndarray:
        offset = np.array([self.k.left_offset_x, 0.0, LEFT_DEPTH + self.k.left_offset_z])
        return cube[:3] + offset + self.left_correction

    def _left_step(self, cube: np.ndarray, opening: float) -> None:
        k, h = self.k, self.left
        if h.phase == "wait" and self.right.phase == "carry":
            h.go("hover", HANDOVER + [k.left_offset_x, 0.0, HOVER], self._left_rot())
        elif h.phase == "hover" and self.right.phase == "present" and self.right.clock >= k.handover_pause:
            if h.arrived:
                h.go("descend", self._take_pose(cube), speed=FINE_SPEED)
        elif h.phase == "descend" and h.arrived:
            self.close_cube, self.close_tcp = cube[:3].copy(), h.measured.copy()
            h.go("close")
        elif h.phase == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - h.clock / GRIP_STEPS)
            if h.clock >= GRIP_STEPS + CLOSE_DWELL:
                if opening >= HELD_OPENING or self.left_attempt >= k.left_attempts:
                    self.release = True
                    h.go("hold")
                else:  # closed on air: open, rise, correct by the miss, come down again
                    miss = self.close_cube + [0.0, 0.0, LEFT_DEPTH] - self.close_tcp
                    self.left_correction += miss  # in height too: no table under this take
                    self.left_attempt += 1
                    h.go("reopen")
        elif h.phase == "reopen":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / GRIP_STEPS)
            if h.clock >= GRIP_STEPS:
                h.go("hover", self._take_pose(cube) + [0.0, 0.0, HOVER])
        elif h.phase == "hold" and self.right.phase == "retreat" and self.right.clock > 10:
            h.go("away", h.pos + [-0.05, 0.0, 0.06])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.retry:make_policy` with `RetryKnobs` fields as kwargs."""
    return BimanualPolicy(RetryKnobs(**kwargs), RetryEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "offset_rescued": {"grasp_offset_x": 0.05},
    "left_high_rescued": {"left_offset_z": 0.05},
    "lagging": {"filter_gain": 0.05},
    "servo_noise": {"joint_noise": 0.03},
    "servo_noise_heavy": {"joint_noise": 0.04},
    "check_never": {"check_rise": 0.2},
    "offset_single": {"grasp_offset_x": 0.05, "max_attempts": 1},
    "offset_uncorrected": {"grasp_offset_x": 0.05, "correct_miss": False},
    "left_high_single": {"left_offset_z": 0.05, "left_attempts": 1},
}
"""Named settings of `retry`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families retry --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json):

| setting                  | what goes wrong                                                | ID    | OOD   |
|--------------------------|----------------------------------------------------------------|-------|-------|
| nominal                  | nothing                                                        | 50/50 | 50/50 |
| offset_rescued           | grasp aimed 5 cm off in x: the first try misses, the retry     | 50/50 | 50/50 |
|                          | corrects by the measured miss and holds                        |       |       |
| left_high_rescued        | left take 5 cm too high: it shuts on air, sees it, comes again | 50/50 | 50/50 |
| servo_noise              | slowly varying joint noise, std 0.03 rad (some tries retried)  | 43/50 | 39/50 |
| lagging                  | joint filter at 0.05 per step: the arm lags, phases time out   | 42/50 | 40/50 |
| servo_noise_heavy        | the same noise, std 0.04 rad                                   | 29/50 | 21/50 |
| check_never              | the check wants a 20 cm rise after a 5 cm lift: every grasp is | 27/50 | 5/50  |
|                          | dropped and retried, the third carried: time runs short       |       |       |
| offset_single            | the 5 cm miss with one try only: it carries what it snagged    | 12/50 | 10/50 |
| offset_uncorrected       | the 5 cm miss retried at the same biased point, three times    | 0/50  | 0/50  |
| left_high_single         | the 5 cm high take with one try: the right lets go of the cube | 0/50  | 0/50  |
"""
