"""Family 1, `waypoint`: a Cartesian waypoint controller with its own inverse kinematics.

The right gripper comes straight down on the cube (top-down, fingers across the cube's faces), closes,
lifts, and turns horizontal to present the cube at the hand-over point, holding only its right half. The
left gripper comes in horizontally from the other side, fingers in the same plane, and takes the left
half; the right one lets go and backs away. Both tool centre points follow straight Cartesian segments
between waypoints with a cubic ease, solved by damped least-squares IK (`arm.py`) at every step.

The cube pose is read once, on the first observation (`observation.environment_state`).

Kwargs (all optional; see `WaypointKnobs`) make it fail the way a real controller does: a grasp point off
the cube, a gripper that closes too early, too late or too weakly, a misplaced hand-over, a timeline run
too fast or too slow, servo noise on the joints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    RIGHT_BASE,
    EpisodeBatch,
    cube_yaw,
    episode_rng,
    gripper_rot,
    piecewise,
    smooth_noise,
    smoothstep,
    top_down_roll,
    wrap_pi,
)

EPISODE_STEPS = 400
MEET = np.array([-0.02, 0.50, 0.20])  # where the cube centre is handed over (m, world)
HOLD_DEPTH = 0.031  # m from each TCP to the cube centre along the approach: each hand holds one half
PRE_GRASP_HEIGHT = 0.08  # m above the grasp point where the descent starts
LIFT_HEIGHT = 0.12  # m lifted straight up before turning to the hand-over
PRE_HANDOVER = 0.08  # m the left gripper stops short of the hand-over before moving in
RETREAT = 0.10  # m each gripper backs off along its approach after letting go / taking the cube
GRIP_RAMP = 12  # steps over which a gripper closes or opens


@dataclass
class WaypointKnobs:
    """How the waypoint controller deviates from its nominal plan; the defaults are the nominal one."""

    grasp_offset_x: float = 0.0  # m added to the right grasp point along world x
    grasp_offset_y: float = 0.0  # m added to the right grasp point along world y
    grasp_offset_z: float = 0.0  # m added to the right grasp point along world z (+ = higher)
    close_delay: int = 0  # steps between reaching the grasp point and closing; < 0 closes while descending
    close_to: float = GRIPPER_CLOSED  # right gripper command when closed; ~0.6 only touches a 4 cm cube
    handover_offset_x: float = 0.0  # m added to the left gripper's hand-over point along world x
    handover_offset_y: float = 0.0  # m added along world y
    handover_offset_z: float = 0.0  # m added along world z
    speed: float = 1.0  # timeline speed; 2 = every segment in half the steps, 0.5 = twice as many
    joint_noise: float = 0.0  # rad, std of slowly varying noise added to every arm joint target
    noise_tau: float = 15.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed={self.speed} must be > 0 (1 = nominal timeline).")
        if not 0.0 <= self.close_to <= 1.0:
            raise ValueError(f"close_to={self.close_to} must be a gripper command in [0, 1] (0 = closed).")
        if self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError(
                f"joint_noise={self.joint_noise} must be >= 0 and noise_tau={self.noise_tau} > 0."
            )


class _Segments:
    """Timed Cartesian waypoints of one arm: position (3,) and (heading, pitch, roll) at each time."""

    def __init__(self, t0: float, pos: np.ndarray, angles: tuple[float, float, float]):
        self.times, self.poses = [t0], [np.concatenate([pos, angles])]

    def to(self, duration: float, pos: np.ndarray | None = None, angles: tuple | None = None) -> float:
        last = self.poses[-1]
        pose = np.concatenate([last[:3] if pos is None else pos, last[3:] if angles is None else angles])
        self.times.append(self.times[-1] + duration)
        self.poses.append(pose)
        return self.times[-1]

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        pose = piecewise(self.times, self.poses, t, smoothstep)
        return pose[:3], gripper_rot(*pose[3:])


class WaypointPlan:
    """One episode's plan: Cartesian waypoints and gripper schedules for both arms, played by IK."""

    def __init__(self, knobs: WaypointKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.left_arm, self.right_arm = left, right
        self.q_left, self.q_right = state[:6].astype(float), state[7:13].astype(float)
        d = 1.0 / knobs.speed  # every duration below is nominal steps times d

        # 1. Right arm: above the grasp point, down, close, lift, turn horizontal at the hand-over.
        grasp = cube[:3] + np.array([knobs.grasp_offset_x, knobs.grasp_offset_y, knobs.grasp_offset_z])
        # The cube is dropped from 5 cm at reset and rests on the table 0.1 s later: its centre is at
        # CUBE_HALF whatever the first observation says. The TCP sits HOLD_DEPTH above it.
        grasp[2] += CUBE_HALF + HOLD_DEPTH - cube[2]
        heading = np.pi + wrap_pi(float(np.arctan2(*(cube[:2] - RIGHT_BASE[:2])[::-1])) - np.pi)
        # Fingers close across the cube's y faces (they stay clear of the left gripper at the hand-over).
        top_down = (heading, np.pi / 2, top_down_roll(heading, cube_yaw(cube[3:7]) + np.pi / 2))
        p0, R0 = right.fk(self.q_right)
        r = _Segments(0.0, p0, (np.pi, float(np.arcsin(-R0[2, 0])), 0.0))
        r.to(60 * d, grasp + [0, 0, PRE_GRASP_HEIGHT], top_down)
        t_grasp = r.to(35 * d, grasp)
        t_hold = r.to(25 * d)
        r.to(35 * d, grasp + [0, 0, LIFT_HEIGHT])
        t_present = r.to(50 * d, MEET + [HOLD_DEPTH, 0, 0], (np.pi, 0.0, 0.0))

        # 2. Left arm: waits, comes to short of the hand-over, moves in, closes; then backs off with it.
        handover = (
            MEET
            - [HOLD_DEPTH, 0, 0]
            + [knobs.handover_offset_x, knobs.handover_offset_y, knobs.handover_offset_z]
        )
        p0, R0 = left.fk(self.q_left)
        left_pose = _Segments(0.0, p0, (0.0, float(np.arcsin(-R0[2, 0])), 0.0))
        left_pose.to(t_hold)
        left_pose.to(t_present - t_hold, handover - [PRE_HANDOVER, 0, 0], (0.0, 0.0, 0.0))
        t_take = left_pose.to(40 * d, handover)
        t_release = t_take + 20 * d  # the left has closed; the right lets go
        left_pose.to(20 * d + 30 * d)
        left_pose.to(30 * d, handover - [RETREAT / 2, 0, -0.03])
        r.to(t_release + GRIP_RAMP - t_present)
        r.to(30 * d, MEET + [HOLD_DEPTH + RETREAT, 0, 0.03])
        self.right_path, self.left_path = r, left_pose

        # 3. Grippers: (time, command) knots, linear in between.
        t_close = t_grasp + knobs.close_delay
        self.right_grip = (
            [0.0, t_close, t_close + GRIP_RAMP, t_release, t_release + GRIP_RAMP],
            [GRIPPER_OPEN, GRIPPER_OPEN, knobs.close_to, knobs.close_to, GRIPPER_OPEN],
        )
        self.left_grip = ([0.0, t_take, t_take + GRIP_RAMP], [GRIPPER_OPEN, GRIPPER_OPEN, GRIPPER_CLOSED])

        # 4. Servo noise on the 12 arm joint targets.
        rng = episode_rng(knobs.seed, cube)
        self.noise = smooth_noise(rng, EPISODE_STEPS, 12, knobs.joint_noise, knobs.noise_tau)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        pos, rot = self.right_path.at(t)
        self.q_right, _ = self.right_arm.ik(pos, rot, self.q_right, iters=8)
        pos, rot = self.left_path.at(t)
        self.q_left, _ = self.left_arm.ik(pos, rot, self.q_left, iters=8)
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.q_left + noise[:6], [np.interp(t, *self.left_grip)],
            self.q_right + noise[6:], [np.interp(t, *self.right_grip)],
        ])  # fmt: skip


class WaypointPolicy(EpisodeBatch):
    """LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`; reads the cube pose."""

    def __init__(self, knobs: WaypointKnobs):
        self.knobs = knobs
        self.right = Arm("right")
        self.left = Arm("left", model=self.right.model)
        super().__init__(self._plan)

    def _plan(self, b: int, batch: dict) -> WaypointPlan:
        state = batch["observation.state"][b]
        cube = batch["observation.environment_state"][b][:7].astype(float)
        return WaypointPlan(self.knobs, self.left, self.right, state, cube)


def make_policy(**kwargs) -> WaypointPolicy:
    """Import-path factory: `families.waypoint:make_policy` with `WaypointKnobs` fields as kwargs."""
    return WaypointPolicy(WaypointKnobs(**kwargs))


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "fast": {"speed": 3.0},
    "late_close": {"close_delay": 25},
    "weak_grip": {"close_to": 0.48},
    "grasp_high": {"grasp_offset_z": 0.015},
    "servo_noise": {"joint_noise": 0.03},
    "servo_noise_heavy": {"joint_noise": 0.05},
    "handover_wide": {"handover_offset_y": 0.03},
    "grasp_miss": {"grasp_offset_x": 0.05},
}
"""Named settings of `waypoint`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py`, 20 ID + 20 OOD episodes each, seed 0; also in measured.json):

| setting           | what goes wrong                                          | ID      | OOD     |
|-------------------|----------------------------------------------------------|---------|---------|
| nominal           | nothing                                                  | 20/20   | 20/20   |
| fast              | the whole timeline at 3x speed                           | 20/20   | 17/20   |
| late_close        | the gripper closes 25 steps (0.5 s) after arriving       | 19/20   | 14/20   |
| weak_grip         | the gripper closes only to 0.48 (the cube slips)         | 20/20   | 11/20   |
| grasp_high        | grasp point 1.5 cm too high (a shallow pinch)            | 17/20   | 11/20   |
| servo_noise       | slowly varying joint noise, std 0.03 rad                 | 7/20    | 10/20   |
| servo_noise_heavy | the same, std 0.05 rad                                   | 2/20    | 3/20    |
| handover_wide     | the left hand takes the cube 3 cm to the side            | 1/20    | 1/20    |
| grasp_miss        | grasp point 5 cm off along x: closes next to the cube    | 0/20    | 0/20    |
"""
