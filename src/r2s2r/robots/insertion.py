"""Scripted bimanual demonstrator for ALOHA insertion: peg in the right hand, socket in the left.

gym-aloha's insertion scene holds a red peg (a 12 x 2 x 2 cm bar) and a blue socket (a 12 cm square tube,
3.2 cm inside, with an 8 cm pin in its middle), both lying along world x. The script picks each object
at its centre with the gripper pitched down and its fingers closing across the object's long axis (the
right arm comes from +x to the peg, the left from -x to the socket), lifts both, carries them to either
side of a meeting point with their axes lined up, and slides the peg into the socket until it touches the
pin (gym-aloha's reward 4, success). Stages: approach (both arms), descend (and close), lift, meet,
align, insert, hold.

The script is closed-loop where a careful demonstrator would be: it approaches the object poses it first
sees and descends to where the objects have settled on the table; after the lift it reads where each
object sits in its hand (position and orientation, from the object pose and the measured joints) so
that it carries the objects, not the hands, into line; from the align stage on it aims the peg along the
socket's measured axis and keeps nudging the peg hand onto that axis (the wrists sag under the load).
It never re-tries. Success on the 10 ID starts of tests/robots/test_insertion.py (seed 0): nominal 10/10,
`hesitant` 9/10, `sloppy` 5/10, `noisy` 4/10, `rushed` 4/10, a grasp 4 cm off-centre along x 5/10;
nominal 20/20 on 20 more ID starts and 19/20 on 20 OOD starts.
"""

from __future__ import annotations

import math

import numpy as np

from r2s2r.robots.ik import BimanualIK, frame_from_axes
from r2s2r.robots.kinematics import quat_matrix
from r2s2r.robots.scripting import LEFT, OPEN, PITCH, PREGRASP_BACKOFF, RIGHT, StagedScript

# The left arm holds the socket, the right arm the peg.
OBJECT = {RIGHT: slice(0, 7), LEFT: slice(7, 14)}  # each arm's object in environment_state
MEET = np.array([0.0, 0.5, 0.2])  # the point (m) between peg and socket when they meet
MEET_GAP = 0.1  # distance (m) of each object's centre from MEET before inserting
INSERT_GAP = 0.045  # the same once inserted: the peg's tip 1 cm past the pin's end (0.05 just touches)
SERVO_GAIN = 0.25  # fraction of the peg's measured misalignment corrected per control step
SERVO_LIMIT = 0.03  # largest such correction (m) per axis
GRASP_HEIGHT = {RIGHT: 0.022, LEFT: 0.02}  # grasp point above each object's centre (m)
LIFT_HEIGHT = 0.1  # how far (m) both arms lift their objects straight up
# Nominal duration (s) of each scripted motion at speed 1.
# fmt: off
DURATIONS = {
    "approach": 1.2, "descend": 0.6, "settle": 0.45, "close": 0.3, "lift": 0.5, "meet": 1.2,
    "align": 0.5, "insert": 0.8,
}
# fmt: on


def yaw_of(quat: np.ndarray) -> float:
    """Heading (rad) of a body's x axis in the horizontal plane, from its (w, x, y, z) quaternion."""
    w, x, y, z = quat
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


class _InsertionScript(StagedScript):
    """One env's insertion episode: a stage machine that schedules Cartesian moves for both arms.

    Same interface as the transfer-cube script: built from the first observation, then `act(state, env)`
    once per control step returns the 14-D action. `cfg` is a `DemonstratorConfig`.
    """

    ORDER = ("approach", "descend", "lift", "meet", "align", "insert", "hold")
    DURATIONS = DURATIONS

    def __init__(self, cfg, rng: np.random.Generator, ik: BimanualIK, state: np.ndarray, env: np.ndarray):
        self._start(cfg, rng, ik, state)
        self.grasp = {arm: (np.zeros(3), np.eye(3)) for arm in (LEFT, RIGHT)}  # planned grasp per arm
        self.grasp_error = {arm: np.zeros(3) for arm in (LEFT, RIGHT)}  # grasp-point error per arm (m)
        self.in_hand = {arm: (np.zeros(3), np.eye(3)) for arm in (LEFT, RIGHT)}  # object in gripper frame
        self.correction = np.zeros(3)  # servo offset (m) added to the peg hand's target while inserting
        self.t, self.stage, self.stage_end = 0, "", 0
        self.events: list[tuple[int, str]] = []  # (step, stage entered)
        self._enter("approach", state, env)

    # ------------------------------------------------------------- geometry
    def _draw_grasp_error(self) -> np.ndarray:
        """This grasp's position error (3,): the systematic offset plus its random draw."""
        c = self.cfg
        error = np.array([c.grasp_offset_x, c.grasp_offset_y, c.grasp_offset_z])
        if c.grasp_noise:
            error = error + c.grasp_noise * self.rng.standard_normal(3)
        return error

    def _plan_grasp(self, arm: int, obj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grasp point (3,) and gripper orientation (3,3) for one arm's object pose (7,), with skill errors.

        The gripper points along the object's long axis, from the arm's side, so the fingers close across
        the object's width."""
        c = self.cfg
        heading = yaw_of(obj[3:7])
        if arm == RIGHT:  # the right arm faces -x: take the axis direction pointing away from its base
            heading += math.pi
        heading = math.atan2(math.sin(heading), math.cos(heading)) + c.grasp_yaw_error
        pitch = PITCH + c.grasp_pitch_error
        h = np.array([math.cos(heading), math.sin(heading)])
        approach = np.array([h[0] * math.cos(pitch), h[1] * math.cos(pitch), -math.sin(pitch)])
        rot = frame_from_axes(approach, np.array([-h[1], h[0], 0.0]))
        return obj[:3] + np.array([0.0, 0.0, GRASP_HEIGHT[arm]]) + self.grasp_error[arm], rot

    def _measure_in_hand(self, state: np.ndarray, env: np.ndarray) -> None:
        """Where each object sits in its gripper's frame, from the object poses and the measured joints."""
        pos, rot = self.ik.fk(np.stack([state[0:6], state[7:13]]))
        for arm in (LEFT, RIGHT):
            obj = env[OBJECT[arm]]
            self.in_hand[arm] = (rot[arm].T @ (obj[:3] - pos[arm]), rot[arm].T @ quat_matrix(obj[3:7]))

    def _hand_for(self, arm: int, obj_pos: np.ndarray, obj_rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gripper pose (grasp point (3,), orientation (3,3)) that holds the object at obj_pos, obj_rot."""
        offset, rel = self.in_hand[arm]
        hand_rot = obj_rot @ rel.T
        return obj_pos - hand_rot @ offset, hand_rot

    def _object_targets(self, gap: float, socket: np.ndarray | None = None) -> dict[int, tuple]:
        """Object poses (centre, orientation) with their axes along world x, `gap` from the meeting point
        each; with a measured `socket` pose (7,), the peg is aimed along that socket's axis instead."""
        aim = self._aim
        if socket is None:
            x = np.array([gap, 0.0, 0.0])
            return {LEFT: (MEET - x, np.eye(3)), RIGHT: (MEET + x + aim, np.eye(3))}
        rot = quat_matrix(socket[3:7])
        if rot[0, 0] < 0:  # the socket is symmetric: take the frame whose x axis points at the peg (+x)
            rot = rot @ np.diag([-1.0, -1.0, 1.0])
        return {RIGHT: (socket[:3] + 2.0 * gap * rot[:, 0] + aim, rot)}

    @property
    def _aim(self) -> np.ndarray:
        """Where (3,) the peg is aimed relative to the socket's axis (m): the handover_offset knobs."""
        c = self.cfg
        return np.array([c.handover_offset_x, c.handover_offset_y, c.handover_offset_z])

    def _servo(self, env: np.ndarray) -> None:
        """Nudge the peg hand so the peg's axis stays on the socket's (plus the aim error): the wrists sag
        under the objects' weight, and a few millimetres off is enough to stub the peg on the rim. The
        nudge is bounded, so a dropped object does not drive the hand into the table."""
        peg, socket = env[OBJECT[RIGHT]], env[OBJECT[LEFT]]
        axis = quat_matrix(socket[3:7])[:, 0]
        miss = socket[:3] - peg[:3] + self._aim
        self.correction += SERVO_GAIN * (miss - axis * (axis @ miss))  # integral action, across the axis only
        self.correction = np.clip(self.correction, -SERVO_LIMIT, SERVO_LIMIT)

    # ------------------------------------------------------------- stages
    def _enter(self, stage: str, state: np.ndarray, env: np.ndarray) -> None:
        self.stage = stage
        self.events.append((self.t, stage))
        start = self.t if stage == "hold" else self.t + self._pause()
        self.stage_end = getattr(self, f"_enter_{stage}")(start, state, env)

    def _enter_approach(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        dur = self._steps("approach")
        for arm in (LEFT, RIGHT):
            self.grasp_error[arm] = self._draw_grasp_error()
            self.grasp[arm] = point, rot = self._plan_grasp(arm, env[OBJECT[arm]])
            self.arms[arm].move(start, dur, point - PREGRASP_BACKOFF * rot[:, 0], rot)
            self.arms[arm].set_grip(start, self._steps("close"), OPEN)
        return start + dur

    def _enter_descend(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        dur = self._steps("descend")
        for arm in (LEFT, RIGHT):  # re-plan: the objects start 5 cm up and have dropped onto the table
            self.grasp[arm] = self._plan_grasp(arm, env[OBJECT[arm]])
            self.arms[arm].move(start, dur, *self.grasp[arm])
            close_at = max(start, start + dur + self._timing_error())
            self.arms[arm].set_grip(close_at, self._steps("close"), self.cfg.close_level)
        return start + dur + self._steps("settle")

    def _enter_lift(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        dur = self._steps("lift")
        for arm in (LEFT, RIGHT):
            point, rot = self.grasp[arm]
            self.arms[arm].move(start, dur, point + np.array([0.0, 0.0, LIFT_HEIGHT]), rot)
        return start + dur

    def _enter_meet(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        """Carry both objects into line on either side of MEET, MEET_GAP from it."""
        self._measure_in_hand(state, env)
        dur = self._steps("meet")
        for arm, (pos, rot) in self._object_targets(MEET_GAP).items():
            self.arms[arm].move(start, dur, *self._hand_for(arm, pos, rot))
        return start + dur

    def _enter_align(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        """Look again: line the peg up with the socket where it is now, still MEET_GAP out."""
        self._measure_in_hand(state, env)
        dur = self._steps("align")
        for arm, (pos, rot) in self._object_targets(MEET_GAP, env[OBJECT[LEFT]]).items():
            self.arms[arm].move(start, dur, *self._hand_for(arm, pos, rot))
        return start + dur

    def _enter_insert(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        """Slide the peg along the socket's axis until its tip is past the pin's end."""
        dur = self._steps("insert")
        for arm, (pos, rot) in self._object_targets(INSERT_GAP, env[OBJECT[LEFT]]).items():
            self.arms[arm].move(start, dur, *self._hand_for(arm, pos, rot))
        return start + dur

    def _enter_hold(self, start: int, state: np.ndarray, env: np.ndarray) -> int:
        return 10**9  # hold both objects where they are until the episode ends

    # ------------------------------------------------------------- stepping
    def act(self, state: np.ndarray, env: np.ndarray) -> np.ndarray:
        """The 14-D action for this control step, given the measured state (14,) and object poses (14,)."""
        while self.t >= self.stage_end:
            self._enter(self.ORDER[self.ORDER.index(self.stage) + 1], state, env)
        if self.stage in ("align", "insert", "hold"):
            self._servo(env)
        (p_left, r_left), (p_right, r_right) = (arm.pose(self.t) for arm in self.arms)
        p_right = p_right + self.correction
        return self._command(np.stack([p_left, p_right]), np.stack([r_left, r_right]))
