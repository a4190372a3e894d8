"""Scripted bimanual demonstrators for ALOHA transfer-cube, with knobs that make them more or less skilled.

A demonstrator is a policy (`reset()`, `select_action(batch)`) that plays the task from the cube pose in
`observation.environment_state`: the right arm reaches over the cube with its gripper pitched down,
descends, closes and lifts the cube to a meeting point in mid-air; the left arm comes in from the other
side with its fingers turned to close on the cube's top and bottom faces, closes, the right arm lets go and
both back off. Gripper poses are turned into joint targets by damped-least-squares IK (`robots.ik`).

The recorder needs more than clean successes, so the knobs of `DemonstratorConfig` inject what goes wrong
when people or controllers demonstrate: grasp-point errors, gripper commands that come early or late,
slower or uneven motion, pauses, and a smooth wobble on the joints. The script is closed-loop where a
careful demonstrator would be: it plans the grasp from the cube pose it first sees, carries the cube (not
the hand) to the meeting point, sends the left hand to where the cube is now, and checks the gripper
openings and the cube after each grasp. When a grasp or the handover visibly failed it re-opens,
re-approaches from the cube's new pose and tries again (`max_retries`), so the data holds failures,
near-misses and recoveries as well as clean successes. Call `reset()` before every new episode.

Each env in the batch runs its own script with its own random generator, seeded from `seed` and the bytes
of that env's first `observation.environment_state`, so an episode's actions do not depend on which other
episodes share its batch. The insertion task's script, with the same knobs, is `robots.insertion`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from r2s2r.robots.ik import BimanualIK, cube_face_heading, frame_from_axes
from r2s2r.robots.insertion import _InsertionScript
from r2s2r.robots.scripting import DT, LEFT, OPEN, PITCH, PREGRASP_BACKOFF, RIGHT, StagedScript

MEET = np.array([0.0, 0.5, 0.25])  # where the cube is handed over (m, world frame)
GRASP_HEIGHT = 0.012  # grasp point above the cube centre (m): keeps the fingertips off the table
LEFT_STANDOFF = 0.10  # distance (m) along -x the left gripper waits before reaching for the cube
LIFT_HEIGHT = 0.08  # how far (m) the right arm lifts the cube straight up before carrying it over
GRIP_EMPTY = 0.35  # measured gripper opening below which a closed gripper holds nothing (the cube reads ~0.6)
LEFT_ROT = frame_from_axes(np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]))  # left: +x, fingers along z
# Nominal duration (s) of each scripted motion at speed 1: a clean episode succeeds after ~4.7 s (step
# ~233) and ends its plan, retreat included, after ~5.9 s (step ~294 of 400).
# fmt: off
DURATIONS = {
    "approach": 1.2, "descend": 0.6, "settle": 0.45, "close": 0.3, "lift": 0.4, "transport": 1.0,
    "reach": 0.6, "release": 0.4, "retreat": 0.8, "regrasp": 0.8,
}
# fmt: on


@dataclass
class DemonstratorConfig:
    """Skill knobs of a scripted demonstrator; the presets in `PRESETS` are named settings of these."""

    speed: float = 1.0  # motion speed multiplier: every segment's duration is divided by it
    speed_jitter: float = 0.0  # std of a random per-segment factor on durations (fraction of 1)
    grasp_offset_x: float = 0.0  # systematic grasp-point error along world x (m)
    grasp_offset_y: float = 0.0  # systematic grasp-point error along world y (m)
    grasp_offset_z: float = 0.0  # systematic grasp-point error along world z (m), + is higher
    grasp_noise: float = 0.0  # std (m) of a random grasp-point error, drawn per grasp attempt per axis
    close_timing: float = 0.0  # systematic gripper timing error (s): + closes/opens late, - early
    close_timing_noise: float = 0.0  # std (s) of a random timing error, drawn per gripper event
    joint_noise: float = 0.0  # std (rad) of a smooth random wobble added to every arm joint target
    joint_noise_tau: float = 0.3  # correlation time (s) of that wobble: larger is slower drift
    hesitation_prob: float = 0.0  # chance of pausing before each scripted stage
    hesitation_max: float = 0.0  # longest such pause (s), drawn uniformly
    max_retries: int = 1  # re-tries after a visibly failed grasp or handover (0: never re-try)
    align_to_cube: bool = True  # turn the gripper so the fingers meet the cube's faces squarely
    grasp_yaw_error: float = 0.0  # error (rad) of the right gripper's heading about the vertical
    grasp_pitch_error: float = 0.0  # error (rad) of the right gripper's downward pitch, + is steeper
    grasp_roll_error: float = 0.0  # turn (rad) of the fingers' closing axis about the gripper's pointing axis
    close_level: float = 0.0  # gripper command when closing: 0 shuts fully, 0.5 stops half open
    drop_at: float = -1.0  # the right hand opens this far (0..1) into carrying the cube over; -1: never
    handover_offset_x: float = 0.0  # error (m) of the left hand's reach target relative to the cube, x
    handover_offset_y: float = 0.0  # the same along y
    handover_offset_z: float = 0.0  # the same along z, + is higher
    push_distance: float = 0.0  # before picking, sweep the open right hand this far (m) through the cube
    push_angle: float = 0.0  # direction (rad, about the vertical) of that sweep
    push_height: float = 0.0  # height (m) of the sweep above the cube's centre: low slides it, high tips it
    explore_time: float = 0.0  # before picking, wander (s) between random points near the cube
    explore_radius: float = 0.05  # how far (m) from the cube those points lie
    ik_iters: int = 3  # DLS iterations per arm per control step (warm-started)

    def __post_init__(self) -> None:
        def bad(name: str, fix: str) -> ValueError:
            return ValueError(f"DemonstratorConfig.{name}={getattr(self, name)!r} is invalid: {fix}.")

        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise bad(f.name, "pass true or false")
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise bad(f.name, "pass a whole number")
            if f.type == "float":
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise bad(f.name, "pass a finite number")
                setattr(self, f.name, float(value))
        nonneg = (
            "speed_jitter", "grasp_noise", "close_timing_noise", "joint_noise", "hesitation_max",
            "push_distance", "explore_time", "explore_radius",
        )  # fmt: skip
        for name in nonneg:
            if getattr(self, name) < 0:
                raise bad(name, "it is a spread or a duration; use a value >= 0")
        if not 0.1 <= self.speed <= 5.0:
            raise bad("speed", "use a multiplier between 0.1 (ten times slower) and 5")
        if self.joint_noise_tau <= 0:
            raise bad("joint_noise_tau", "use a correlation time > 0 s, e.g. 0.3")
        if not 0.0 <= self.hesitation_prob <= 1.0:
            raise bad("hesitation_prob", "use a probability in [0, 1]")
        for axis in "xyz":
            for name in (f"grasp_offset_{axis}", f"handover_offset_{axis}"):
                if abs(getattr(self, name)) > 0.1:
                    raise bad(
                        name, "use an offset within +-0.1 m; larger ones leave the cube's neighbourhood"
                    )
        if not 0.0 <= self.close_level <= 0.9:
            raise bad("close_level", "use a command in [0, 0.9]: 0 shuts the gripper, 0.9 barely moves it")
        if not (self.drop_at == -1.0 or 0.0 <= self.drop_at <= 1.0):
            raise bad("drop_at", "use a fraction of the carry in [0, 1], or -1 for never")
        for name in ("grasp_yaw_error", "grasp_pitch_error", "grasp_roll_error"):
            if abs(getattr(self, name)) > 1.0:
                raise bad(name, "use orientation errors within +-1 rad")
        if abs(self.close_timing) > 1.0:
            raise bad("close_timing", "use an offset within +-1 s")
        if not 0 <= self.max_retries <= 10:
            raise bad("max_retries", "use 0..10")
        if not 1 <= self.ik_iters <= 50:
            raise bad("ik_iters", "use 1..50 iterations per step")


# Named skill levels, from clean to clumsy. Success over 100 ID / 100 OOD episodes (benchmarks/record.py,
# seed 0; any-step success, then still held at the end): nominal 100/100 (held 100/100), hesitant 97/96,
# rushed 99/98 (held 78/74), noisy 88/94, retrying 85/87 (a quarter of them after a lost grasp), sloppy
# 29/34. `retrying`, `noisy` and `rushed` lose grasps and recover, so their data holds re-grasps.
# fmt: off
PRESETS: dict[str, dict] = {
    "nominal": {},  # clean and on time; one re-grasp allowed should physics ever say no
    "noisy": dict(joint_noise=0.012, grasp_noise=0.008, close_timing_noise=0.1, speed_jitter=0.1),
    "sloppy": dict(  # grasps high, late, shaky and in a hurry, and never re-tries: fails more than not
        joint_noise=0.015, grasp_noise=0.008, grasp_offset_z=0.006, close_timing=0.05,
        close_timing_noise=0.15, speed=1.2, speed_jitter=0.15, max_retries=0,
    ),
    "hesitant": dict(  # slow and uneven, pauses before stages
        speed=0.8, speed_jitter=0.2, hesitation_prob=0.3, hesitation_max=0.6, joint_noise=0.008,
        grasp_noise=0.004,
    ),
    "retrying": dict(grasp_noise=0.012, close_timing_noise=0.05, joint_noise=0.008, max_retries=3),
    "rushed": dict(  # 60 % faster, closes early: bumps, drops and re-grasps
        speed=1.6, speed_jitter=0.15, close_timing=-0.08, close_timing_noise=0.06, joint_noise=0.008,
    ),
    "fumbling": dict(  # aims centimetres off: closes on air beside, above or short of the cube, nudges it
        grasp_noise=0.025, close_timing_noise=0.1, joint_noise=0.01, max_retries=1,
    ),
}
# fmt: on
# skill="mix": the preset of each episode is drawn with these weights, for world-model training data.
MIX = {"nominal": 0.3, "noisy": 0.2, "retrying": 0.15, "sloppy": 0.15, "hesitant": 0.1, "rushed": 0.1}


class _TransferScript(StagedScript):
    """One env's transfer-cube episode: a stage machine that schedules Cartesian moves for both arms.

    Each stage has an entry action (`_enter_<stage>`: schedule moves and gripper ramps, return the step
    the stage ends at). When a stage ends, `_next_stage` picks the next one, checking the observation
    where a careful demonstrator would look: did the gripper close on the cube, did the cube come up.
    """

    ORDER = ("approach", "descend", "lift", "transport", "reach", "release", "retreat", "done")
    DURATIONS = DURATIONS
    PUSH = ("push", "push_down", "push_sweep")  # optional stages before the first approach

    def __init__(
        self,
        cfg: DemonstratorConfig,
        rng: np.random.Generator,
        ik: BimanualIK,
        state: np.ndarray,
        cube: np.ndarray,
    ):
        pos, rot = self._start(cfg, rng, ik, state)
        self.home = (pos.copy(), rot.copy())  # (2,3), (2,3,3)
        self.retries_left = cfg.max_retries
        self.t, self.stage, self.stage_end = 0, "", 0
        self.grasp = (np.zeros(3), np.eye(3))  # planned grasp point (3,) and right orientation (3,3)
        self.attempts = 0  # right-arm grasp attempts so far
        self.servo_until = 0  # step until which the left hand's reach target follows the measured cube
        self.events: list[tuple[int, str]] = []  # (step, stage entered): what happened, for inspection
        self.close_at: dict[int, int] = {}  # arm -> the step its gripper last started to close
        self.explore_end: int | None = None  # step the wandering stops (explore_time)
        self.push = (np.zeros(3), np.zeros(3))  # start and end of the push (push_distance)
        self._enter(self._opening_stage("start"), state, cube)

    # ------------------------------------------------------------- geometry
    def _plan_grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grasp point (3,) and right-gripper orientation (3,3) for the cube pose (7,), with skill errors."""
        to_cube = cube[:2] - self.ik.base[RIGHT, :2]
        heading = math.atan2(to_cube[1], to_cube[0])
        if self.cfg.align_to_cube:  # nearest heading along a face normal: fingers land flat on two faces
            face = cube_face_heading(cube[3:7])
            heading = face + round((heading - face) / (math.pi / 2)) * (math.pi / 2)
        heading += self.cfg.grasp_yaw_error
        pitch = PITCH + self.cfg.grasp_pitch_error
        h = np.array([math.cos(heading), math.sin(heading)])
        approach = np.array([h[0] * math.cos(pitch), h[1] * math.cos(pitch), -math.sin(pitch)])
        level, roll = np.array([-h[1], h[0], 0.0]), self.cfg.grasp_roll_error  # roll: about the approach
        closing = math.cos(roll) * level + math.sin(roll) * np.cross(approach, level)
        rot = frame_from_axes(approach, closing)
        c = self.cfg
        error = np.array([c.grasp_offset_x, c.grasp_offset_y, c.grasp_offset_z])
        if c.grasp_noise:
            error = error + c.grasp_noise * self.rng.standard_normal(3)
        return cube[:3] + np.array([0.0, 0.0, GRASP_HEIGHT]) + error, rot

    def _cube_offset(self, state: np.ndarray, cube: np.ndarray, arm: int) -> float:
        """Distance (m) from the cube centre to an arm's grasp point, from the measured joints."""
        tcp = self.ik.fk(np.stack([state[0:6], state[7:13]]))[0][arm]
        return float(np.linalg.norm(cube[:3] - tcp))

    # ------------------------------------------------------------- stages
    def _enter(self, stage: str, state: np.ndarray, cube: np.ndarray) -> None:
        self.stage = stage
        self.events.append((self.t, stage))
        start = self.t if stage in ("done", "give_up") else self.t + self._pause()
        self.stage_end = getattr(self, f"_enter_{stage}")(start, state, cube)

    def _enter_approach(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        self.attempts += 1
        self.grasp = self._plan_grasp(cube)
        point, rot = self.grasp
        dur = self._steps("approach" if self.attempts == 1 else "regrasp")
        self.arms[RIGHT].move(start, dur, point - PREGRASP_BACKOFF * rot[:, 0], rot)
        self.arms[RIGHT].set_grip(start, self._steps("close"), OPEN)
        if self.attempts > 1:  # a re-grasp: the left hand opens and waits out of the way for the handover
            self.arms[LEFT].move(start, dur, MEET - np.array([LEFT_STANDOFF, 0.0, 0.0]), LEFT_ROT)
            self.arms[LEFT].set_grip(start, self._steps("close"), OPEN)
        return start + dur

    def _enter_descend(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("descend")
        self.arms[RIGHT].move(start, dur, *self.grasp)
        close_at = self.close_at[RIGHT] = max(start, start + dur + self._timing_error())
        self.arms[RIGHT].set_grip(close_at, self._steps("close"), self.cfg.close_level)
        return start + dur + self._steps("settle")

    def _enter_lift(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("lift")
        point, rot = self.grasp
        self.arms[RIGHT].move(start, dur, point + np.array([0.0, 0.0, LIFT_HEIGHT]), rot)
        return start + dur

    def _enter_transport(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("transport")
        tcp = self.ik.fk(np.stack([state[0:6], state[7:13]]))[0][RIGHT]
        held = cube[:3] - tcp  # where in the hand the cube sits: carry the cube, not the hand, to MEET
        self.arms[RIGHT].move(start, dur, MEET - held, self.grasp[1])
        self.arms[LEFT].move(start, dur, MEET - np.array([LEFT_STANDOFF, 0.0, 0.0]), LEFT_ROT)
        self.arms[LEFT].set_grip(start, self._steps("close"), OPEN)
        if self.cfg.drop_at >= 0:  # lets go on the way over
            self.arms[RIGHT].set_grip(start + round(self.cfg.drop_at * dur), self._steps("close"), OPEN)
        return start + dur

    def _enter_reach(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("reach")
        target = cube[:3] + self._handover_offset  # to where the cube is now, not where planned
        self.arms[LEFT].move(start, dur, target, LEFT_ROT)
        self.servo_until = close_at = self.close_at[LEFT] = max(start, start + dur + self._timing_error())
        self.arms[LEFT].set_grip(close_at, self._steps("close"), self.cfg.close_level)
        return start + dur + self._steps("settle")

    @property
    def _handover_offset(self) -> np.ndarray:
        """Where (3,) the left hand aims, relative to the cube's centre (m)."""
        c = self.cfg
        return np.array([c.handover_offset_x, c.handover_offset_y, c.handover_offset_z])

    def _enter_explore(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        """Wander, gripper open: one straight move to a random point above and around the cube per entry,
        until `explore_time` has passed since the first."""
        c = self.cfg
        if self.explore_end is None:
            self.explore_end = start + max(1, round(c.explore_time / DT))
            self.arms[RIGHT].set_grip(start, self._steps("close"), OPEN)
        spread = c.explore_radius * self.rng.uniform(-1.0, 1.0, 3) * np.array([1.0, 1.0, 0.5])
        point = cube[:3] + np.array([0.0, 0.0, 0.04 + GRASP_HEIGHT]) + spread
        dur = max(1, min(self.explore_end - start, self._steps("reach")))
        self.arms[RIGHT].move(start, dur, point, self._plan_grasp(cube)[1])
        return start + dur

    def _push_line(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (3,) of the push: through the cube's centre at `push_height`, from 4 cm short of
        its near side to `push_distance` past its centre."""
        c = self.cfg
        direction = np.array([math.cos(c.push_angle), math.sin(c.push_angle), 0.0])
        centre = cube[:3] + np.array([0.0, 0.0, c.push_height])
        return centre - 0.06 * direction, centre + c.push_distance * direction

    def _enter_push(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        """Above the push's start, gripper open (then `push_down`, `push_sweep`)."""
        self.push = self._push_line(cube)
        self.arms[RIGHT].set_grip(start, self._steps("close"), OPEN)
        dur = self._steps("approach")
        self.arms[RIGHT].move(
            start, dur, self.push[0] + np.array([0.0, 0.0, 0.06]), self._plan_grasp(cube)[1]
        )
        return start + dur

    def _enter_push_down(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("descend")
        self.arms[RIGHT].move(start, dur, self.push[0], self.arms[RIGHT].r1)
        return start + dur

    def _enter_push_sweep(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("transport")
        self.arms[RIGHT].move(start, dur, self.push[1], self.arms[RIGHT].r1)
        return start + dur

    def _enter_rereach(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("reach")
        self.arms[LEFT].set_grip(start, self._steps("close"), OPEN)
        self.arms[LEFT].move(start, dur, cube[:3] - np.array([LEFT_STANDOFF, 0.0, 0.0]), LEFT_ROT)
        return start + dur

    def _enter_release(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        open_at = max(start, start + self._timing_error())
        self.arms[RIGHT].set_grip(open_at, self._steps("close"), OPEN)
        return start + self._steps("release")

    def _enter_retreat(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        dur = self._steps("retreat")
        right, left = self.arms[RIGHT], self.arms[LEFT]
        right.move(start, dur, right.p1 - PREGRASP_BACKOFF * right.r1[:, 0], right.r1)
        left.move(start, dur, left.p1 - np.array([0.05, 0.0, 0.0]), left.r1)
        return start + dur

    def _enter_give_up(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        self.arms[RIGHT].set_grip(start, self._steps("close"), OPEN)
        self.arms[RIGHT].move(start, self._steps("regrasp"), self.home[0][RIGHT], self.home[1][RIGHT])
        return 10**9

    def _enter_done(self, start: int, state: np.ndarray, cube: np.ndarray) -> int:
        return 10**9  # hold: the left arm keeps the cube in the air until the episode ends

    def _failed(self, state: np.ndarray, cube: np.ndarray) -> bool:
        """Whether the stage that just ended visibly failed, from the gripper opening and the cube pose."""
        if self.stage == "descend":  # closed on air: the fingers met without the cube between them
            return state[6 + 7 * RIGHT] < GRIP_EMPTY
        if self.stage == "lift":  # cube still down, or not in the hand
            return cube[2] < 0.06 or self._cube_offset(state, cube, RIGHT) > 0.05
        if self.stage == "transport":  # dropped on the way
            return self._cube_offset(state, cube, RIGHT) > 0.05
        if self.stage == "reach":  # left closed on air or beside the cube
            return state[6 + 7 * LEFT] < GRIP_EMPTY or self._cube_offset(state, cube, LEFT) > 0.03
        return False

    def _opening_stage(self, after: str) -> str:
        """The stage after `after` ("start", or an optional stage) among those before the first approach:
        exploring, then pushing, where their knobs ask for them."""
        c = self.cfg
        if after == "start" and c.explore_time > 0:
            return "explore"
        if after == "explore" and self.t < self.explore_end:
            return "explore"
        if after in ("start", "explore") and c.push_distance > 0:
            return "push"
        if after in self.PUSH[:-1]:
            return self.PUSH[self.PUSH.index(after) + 1]
        return "approach"

    def _next_stage(self, state: np.ndarray, cube: np.ndarray) -> str:
        """The stage after the current one ends, reading the observation where the script is closed-loop."""
        if self.stage in ("explore", *self.PUSH):
            return self._opening_stage(self.stage)
        if self.stage == "rereach":
            return "reach"
        if self._failed(state, cube):
            # A missed handover with the cube still in the right hand is retried by the left hand; a cube
            # that fell is picked up again by the right (approach re-plans from where the cube lies).
            in_right_hand = cube[2] > 0.06 and self._cube_offset(state, cube, RIGHT) < 0.05
            retry = "rereach" if self.stage == "reach" and in_right_hand else "approach"
            if self.retries_left > 0:
                self.retries_left -= 1
                return retry
            if retry == "approach":
                return "give_up"  # out of retries: stop rather than carry an empty hand around
        return self.ORDER[self.ORDER.index(self.stage) + 1]

    # ------------------------------------------------------------- stepping
    def act(self, state: np.ndarray, cube: np.ndarray) -> np.ndarray:
        """The 14-D action for this control step, given the measured state (14,) and cube pose (7,)."""
        while self.t >= self.stage_end:
            self._enter(self._next_stage(state, cube), state, cube)
        if self.stage == "reach" and self.t < self.servo_until:  # follow the cube until the fingers close
            self.arms[LEFT].p1 = cube[:3] + self._handover_offset
        (p_left, r_left), (p_right, r_right) = (arm.pose(self.t) for arm in self.arms)
        return self._command(np.stack([p_left, p_right]), np.stack([r_left, r_right]))


class ScriptedDemonstrator:
    """A batched scripted policy: one independent script per env, created on first sight.

    Follows r2s2r's policy interface (`reset()`, `select_action(batch) -> (B,14)`); reads
    `observation.state` (B,14) and `observation.environment_state` and ignores images. The object poses
    pick the script: (B,7), one cube, plays `_TransferScript`; (B,14), peg then socket, plays
    `robots.insertion._InsertionScript`.
    """

    def __init__(
        self,
        cfg: DemonstratorConfig,
        seed: int = 0,
        task: str = "transfer_cube",
        mix: dict[str, float] | None = None,
    ):
        self.cfg, self.seed, self.task = cfg, int(seed), task
        self.mix = mix  # preset -> probability: each episode draws its own skill level
        self.ik = BimanualIK()
        self.scripts: list[_TransferScript | _InsertionScript] | None = None
        self.name = f"demonstrator:{task}"

    def reset(self) -> None:
        """Forget the running episodes; the next `select_action` plans new ones from its observation."""
        self.scripts = None

    def episode_config(self, rng: np.random.Generator) -> DemonstratorConfig:
        """This episode's knobs: the fixed ones, or a preset drawn from `mix` with the episode's generator."""
        if not self.mix:
            return self.cfg
        names = list(self.mix)
        weights = np.array([self.mix[n] for n in names], dtype=float)
        return DemonstratorConfig(**PRESETS[names[rng.choice(len(names), p=weights / weights.sum())]])

    def episode_rng(self, env_state: np.ndarray) -> np.random.Generator:
        """The random generator of one episode: a function of `seed` and its initial object pose only."""
        words = np.frombuffer(np.asarray(env_state, dtype=np.float32).tobytes(), dtype=np.uint32)
        return np.random.default_rng([self.seed, *words.tolist()])

    def reseed(self, seed: int) -> None:
        """Draw the rest of the running episodes' randomness (grasp errors, timing, wobble) from `seed`.

        The action search calls this on copies of the policy to get its own alternative plans.
        """
        for i, script in enumerate(self.scripts or []):
            script.rng = np.random.default_rng([self.seed, int(seed), i])

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Joint-position targets (B,14) float32 for every env, one control step of each script."""
        for key in ("observation.state", "observation.environment_state"):
            if key not in batch:
                raise KeyError(
                    f"{self.name} needs '{key}' in the batch but got {sorted(batch)}; run it in the "
                    "reference world, which provides the object pose, not on hardware."
                )
        state = batch["observation.state"].detach().cpu().numpy().astype(np.float32)  # (B,14)
        env_state = batch["observation.environment_state"].detach().cpu().numpy().astype(np.float32)
        state64, env64 = state.astype(float), env_state.astype(float)
        if self.scripts is None:
            rngs = [self.episode_rng(e) for e in env_state]  # from the float32 bytes the world reported
            script = _InsertionScript if env_state.shape[-1] == 14 else _TransferScript  # peg and socket
            self.scripts = [
                script(self.episode_config(rng), rng, self.ik, st, e)
                for rng, st, e in zip(rngs, state64, env64, strict=True)
            ]
        elif len(self.scripts) != len(state):
            raise ValueError(
                f"{self.name} was planning {len(self.scripts)} episodes but got a batch of {len(state)}; "
                "call reset() before starting episodes with a different batch size."
            )
        actions = [script.act(st, e) for script, st, e in zip(self.scripts, state64, env64, strict=True)]
        return torch.from_numpy(np.stack(actions).astype(np.float32)).to(batch["observation.state"].device)


def make_demonstrator(
    task: str = "transfer_cube", skill: str = "nominal", seed: int = 0, **knobs
) -> ScriptedDemonstrator:
    """A scripted demonstrator of `task` at skill preset `skill`, with `knobs` overriding preset fields.

    Every argument is JSON-friendly so it can come from `--policy.kwargs`, e.g.
    `--policy.path=r2s2r.robots.demonstrators:make_demonstrator --policy.kwargs='{"skill": "sloppy"}'`.
    """
    if task not in ("transfer_cube", "insertion"):
        raise ValueError(
            f"task='{task}' has no scripted demonstrator yet; use 'transfer_cube' or 'insertion'."
        )
    if skill == "mix":  # every episode draws its preset: data with successes, failures and recoveries
        if knobs:
            raise ValueError("skill='mix' draws whole presets per episode; it takes no knobs.")
        return ScriptedDemonstrator(DemonstratorConfig(), seed=seed, task=task, mix=MIX)
    if skill not in PRESETS:
        raise ValueError(f"skill='{skill}' is not a preset; choose one of {', '.join(PRESETS)} or 'mix'.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number >= 0 (it seeds numpy's SeedSequence).")
    known = {f.name for f in fields(DemonstratorConfig)}
    unknown = sorted(set(knobs) - known)
    if unknown:
        raise ValueError(f"unknown demonstrator knob(s) {unknown}; known knobs: {', '.join(sorted(known))}.")
    cfg = DemonstratorConfig(**{**PRESETS[skill], **knobs})
    return ScriptedDemonstrator(cfg, seed=seed, task=task)
