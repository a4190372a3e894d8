"""What the scripted bimanual demonstrators share: timing, gripper and arm conventions, skill randomness and
the step from two gripper poses to a 14-D ALOHA action.

`robots.demonstrators` (transfer-cube) and `robots.insertion` each subclass `StagedScript` with their own
stages and `DURATIONS`; the knobs they read (`speed`, `speed_jitter`, `close_timing`, `hesitation_*`,
`joint_noise`, `ik_iters`) are fields of `demonstrators.DemonstratorConfig`.
"""

from __future__ import annotations

import math

import numpy as np

from r2s2r.robots.ik import BimanualIK, PoseTrack

DT = 0.02  # control period (s) of the reference world: 50 Hz
OPEN, CLOSED = 1.0, 0.0  # normalized gripper commands
LEFT, RIGHT = 0, 1  # arm index in (2, ...) arrays; the action is [left arm, left grip, right arm, right grip]
PITCH = math.radians(60.0)  # downward pitch of a picking gripper
PREGRASP_BACKOFF = 0.08  # distance (m) above the grasp point, along the gripper axis, before descending


class StagedScript:
    """One env's episode as a stage machine over Cartesian moves of both arms (`self.arms`, PoseTracks),
    with the skill randomness of a demonstrator config; subclasses set `DURATIONS` (nominal seconds per
    motion at speed 1) and call `_start` first in their constructor."""

    DURATIONS: dict[str, float] = {}

    def _start(
        self, cfg, rng: np.random.Generator, ik: BimanualIK, state: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Arms at the measured state (14,): IK warm start, one PoseTrack per arm, no joint wobble yet.
        Returns the grippers' start poses, positions (2,3) and orientations (2,3,3)."""
        self.cfg, self.rng, self.ik = cfg, rng, ik
        self.q = np.stack([state[0:6], state[7:13]]).astype(float)  # (2,6) IK warm start
        pos, rot = ik.fk(self.q)
        self.arms = [PoseTrack(pos[a], rot[a], state[6 + 7 * a]) for a in (LEFT, RIGHT)]
        self.noise = np.zeros((2, 6))  # smoothed joint wobble (rad)
        self.noise_decay = math.exp(-DT / cfg.joint_noise_tau)
        return pos, rot

    # ------------------------------------------------------------- randomness
    def _steps(self, name: str) -> int:
        """Duration in control steps of a nominal segment, with speed and per-segment jitter applied."""
        jitter = self.cfg.speed_jitter * self.rng.standard_normal() if self.cfg.speed_jitter else 0.0
        return max(1, round(self.DURATIONS[name] * max(0.3, 1.0 + jitter) / self.cfg.speed / DT))

    def _timing_error(self) -> int:
        """Gripper command offset in steps (+ late, - early) for one gripper event."""
        c = self.cfg
        noise = c.close_timing_noise * self.rng.standard_normal() if c.close_timing_noise else 0.0
        return round((c.close_timing + noise) / DT)

    def _pause(self) -> int:
        """Hesitation before a stage, in steps (0 most of the time)."""
        if self.cfg.hesitation_prob and self.rng.random() < self.cfg.hesitation_prob:
            return round(self.rng.uniform(0.0, self.cfg.hesitation_max) / DT)
        return 0

    # ------------------------------------------------------------- stepping
    def _command(self, pos: np.ndarray, rot: np.ndarray) -> np.ndarray:
        """The 14-D action that takes the grippers to `pos` (2,3), `rot` (2,3,3) this step: IK from the last
        solution, plus the joint wobble, clipped to the joint limits; the grippers follow their ramps."""
        self.q = self.ik.solve(self.q, pos, rot, iters=self.cfg.ik_iters)
        if self.cfg.joint_noise:  # Ornstein-Uhlenbeck: stationary std joint_noise, correlation time tau
            a = self.noise_decay
            kick = math.sqrt(1.0 - a * a) * self.cfg.joint_noise * self.rng.standard_normal((2, 6))
            self.noise = a * self.noise + kick
        q = np.clip(self.q + self.noise, self.ik.lower, self.ik.upper)  # (2,6)
        grips = [arm.grip(self.t) for arm in self.arms]
        self.t += 1
        return np.concatenate([q[LEFT], [grips[LEFT]], q[RIGHT], [grips[RIGHT]]])
