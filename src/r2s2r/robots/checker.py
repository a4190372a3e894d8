"""The physics-constraint checker: per-step, typed violations of a (predicted or proposed) trajectory.

Given proprio states (B,T,S) sampled every `dt` seconds, and optionally the commanded actions (B,T,A) and the
object states (B,T,7*n_objects), `PhysicsChecker.check` returns a boolean (B,T,K) array, one column per
violation type in `VIOLATIONS`:

- `joint_position`: an arm joint beyond its MJCF range (+ `position_margin`), or a commanded target beyond it;
- `joint_velocity`, `joint_acceleration`: finite differences over the spec's `limit_window` (0.1 s for
  ALOHA) above its limits, so 50 Hz and 10 Hz trajectories are held to the same numbers;
- `gripper_range`: a commanded gripper outside 0..1, or a gripper state outside what the robot reaches;
- `arm_table_collision`, `arm_arm_collision`: a contact deeper than `collision_depth` between an arm and the
  table, or between the two arms, found by MuJoCo's own forward kinematics and collision detection on the
  robot model (`mj_kinematics` + `mj_collision`, arm and table geoms only; the objects are left out);
- `object_below_table`: an object sunk into the table top;
- `object_floating`: an object above the table, away from both grippers, for longer than a fall would take;
- `object_teleport`: an object over the table moving faster than `teleport_speed`, or an untouched one
  whose horizontal speed jumps by more than `teleport_speed_change` in one step (only a contact can do that);
- `object_unpushed`: an object resting on the table that speeds up with no gripper near it (motion without
  contact; a landing cube may slide on, but only slower and slower).

Heights are measured from each object's resting height in its current orientation (a cube on its edge
rests higher than one on its face), read from the object's geoms in the MJCF.

The limits come from the robot spec (`EmbodimentSpec`): positions from the MJCF, velocities, accelerations and
the reachable gripper range from the envelope of the reference world's recordings (see `robots/spec.py`).
The tolerances below were set once on the world model's training recordings; `benchmarks/checker.py`
measures recall on injected violations and false alarms on separate real trajectories.

Joint limits and object rules are vectorised numpy; the collision pass runs MuJoCo on each state (about
15 k states/s on one CPU core), skipping it when `collisions=False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import torch
from gym_aloha import constants as aloha_constants

from r2s2r.robots.ik import ARM_JOINTS, DEFAULT_TCP
from r2s2r.robots.kinematics import table_geometry
from r2s2r.robots.spec import EmbodimentSpec

VIOLATIONS = (
    "joint_position",
    "joint_velocity",
    "joint_acceleration",
    "gripper_range",
    "arm_table_collision",
    "arm_arm_collision",
    "object_below_table",
    "object_floating",
    "object_teleport",
    "object_unpushed",
)
_COL = {t: k for k, t in enumerate(VIOLATIONS)}
GRAVITY = 9.81


@dataclass
class CheckerConfig:
    """Tolerances of the physics checker (metres, radians, seconds)."""

    position_margin: float = 0.25  # rad an arm joint may be pushed past its MJCF range (recordings: 0.2)
    gripper_command_margin: float = 1e-3  # how far a commanded gripper may leave 0..1 (rounding)
    collision_depth: float = (
        0.03  # m: contacts deeper than this are collisions (mesh convex hulls overlap a bit)
    )
    collisions: bool = True  # run the MuJoCo collision pass (the slow part)
    below_table_depth: float = 0.015  # m an object may sink below its resting height (drops: 12 mm)
    lift_height: float = 0.01  # m above its resting height from which an object counts as off the table
    contact_distance: float = (
        0.12  # m from an object's centre to a grasp point within which it may be touched
    )
    float_grace: float = 0.2  # s an unheld object may stay up beyond its free-fall time (bounces, release)
    teleport_speed: float = 5.0  # m/s no object over the table reaches (a flung cube: 3.2 in the recordings)
    teleport_speed_change: float = 0.8  # m/s an untouched object's horizontal speed cannot gain in one step
    slide_speed: float = 0.1  # m/s of sliding on the table above which speeding up needs a contact

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, float) and not value >= 0:
                raise ValueError(f"CheckerConfig.{name}={value} must be a number >= 0.")


@dataclass
class Violations:
    """Typed per-step violations of a batch of trajectories."""

    flags: np.ndarray  # (B,T,K) bool, K = len(types)
    types: tuple[str, ...] = VIOLATIONS

    def any(self) -> np.ndarray:
        """(B,T) whether any violation happens at each step."""
        return self.flags.any(-1)

    def trajectory(self) -> np.ndarray:
        """(B,K) whether each trajectory has each type anywhere."""
        return self.flags.any(1)

    def counts(self, b: int | None = None) -> dict[str, int]:
        """Violating steps per type, over the batch or for trajectory `b`."""
        flags = self.flags if b is None else self.flags[b : b + 1]
        return {t: int(flags[..., k].sum()) for k, t in enumerate(self.types)}

    def first_step(self) -> np.ndarray:
        """(B,) the first step with any violation, -1 where there is none."""
        anyv = self.any()
        return np.where(anyv.any(1), anyv.argmax(1), -1)


def _as_numpy(x) -> np.ndarray | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


class PhysicsChecker:
    """Checks trajectories of one robot against its spec and, through MuJoCo, against its own geometry.

    Example:
        checker = PhysicsChecker(robot_spec("aloha"))
        v = checker.check(states, dt=0.1, actions=actions, env_states=cube_poses)  # (B,T,...) each
        v.flags[..., VIOLATIONS.index("arm_table_collision")]
    """

    def __init__(self, spec: EmbodimentSpec, cfg: CheckerConfig | None = None):
        if spec.model_xml is None:
            raise ValueError(f"robot '{spec.name}' has no model_xml; the checker needs it for collisions.")
        self.spec = spec
        self.cfg = cfg or CheckerConfig()
        self.lower = np.array(spec.position_lower)
        self.upper = np.array(spec.position_upper)
        self.velocity = np.array(spec.velocity_limits)
        self.acceleration = np.array(spec.acceleration_limits)
        self.grippers = list(spec.gripper_indices)
        self.arm = [i for i in range(spec.state_dim) if i not in self.grippers]
        self._load_model(Path(spec.model_xml))

    # ------------------------------------------------------------------ the MuJoCo model
    def _load_model(self, xml: Path) -> None:
        model = mujoco.MjModel.from_xml_path(str(xml))
        names = [model.geom(i).name for i in range(model.ngeom)]
        self.side = np.zeros(model.ngeom, dtype=int)  # 0: neither arm, 1: left arm, 2: right arm
        for i, name in enumerate(names):
            self.side[i] = (
                1 if name.startswith("vx300s_left/") else 2 if name.startswith("vx300s_right/") else 0
            )
        # The table top's height and x-y extent, and each free object's corners in its body frame.
        self.table_top, lo, hi, self.object_corners = table_geometry(model)  # raises without a table
        self.table, self.table_xy = names.index("table"), (lo, hi)
        # Objects take no part in the collision pass: arm-object contacts are grasps, not faults.
        keep = (self.side > 0) | (np.arange(model.ngeom) == self.table)
        model.geom_contype[~keep] = 0
        model.geom_conaffinity[~keep] = 0
        self.model, self.data = model, mujoco.MjData(model)
        self.arm_qpos = [
            [model.jnt_qposadr[model.joint(f"vx300s_{s}/{j}").id] for j in ARM_JOINTS]
            for s in ("left", "right")
        ]
        self.finger_qpos = [
            (model.jnt_qposadr[model.joint(f"vx300s_{s}/left_finger").id],
             model.jnt_qposadr[model.joint(f"vx300s_{s}/right_finger").id])
            for s in ("left", "right")
        ]  # fmt: skip
        self.gripper_body = [model.body(f"vx300s_{s}/gripper_link").id for s in ("left", "right")]

    def resting_height(self, k: int, quat: np.ndarray) -> np.ndarray:
        """Height (...) of object k's origin when its lowest corner is on the table; quats (...,4) wxyz."""
        norm = np.maximum(np.linalg.norm(quat, axis=-1, keepdims=True), 1e-9)  # predicted quats drift
        w, x, y, z = np.moveaxis(quat / norm, -1, 0)
        row_z = np.stack(
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1
        )  # R[2,:]
        corners = self.object_corners[min(k, len(self.object_corners) - 1)]
        return self.table_top - (row_z @ corners.T).min(-1)

    def qpos(self, states: np.ndarray) -> np.ndarray:
        """The model's qpos (N,nq) for 14-D proprio states (N,S): arm joints + normalized grippers."""
        opened, closed = (
            aloha_constants.PUPPET_GRIPPER_POSITION_OPEN,
            aloha_constants.PUPPET_GRIPPER_POSITION_CLOSE,
        )
        qpos = np.tile(self.model.qpos0, (len(states), 1))
        for arm, (adr, (lf, rf), g) in enumerate(
            zip(self.arm_qpos, self.finger_qpos, self.grippers, strict=True)
        ):
            qpos[:, adr] = states[:, self.arm[6 * arm : 6 * arm + 6]]
            finger = states[:, g] * (opened - closed) + closed  # gym-aloha's gripper normalization, inverted
            qpos[:, lf], qpos[:, rf] = finger, -finger
        return qpos

    def geometry(self, states: np.ndarray, collisions: bool = True) -> dict[str, np.ndarray]:
        """Per state (N,S): deepest arm-table and arm-arm contacts (N,) in m, grasp points (N,2,3)."""
        n = len(states)
        table_depth, arm_depth = np.zeros(n), np.zeros(n)
        gripper_pos, gripper_rot = np.zeros((n, 2, 3)), np.zeros((n, 2, 9))
        model, data = self.model, self.data
        for i, qpos in enumerate(self.qpos(states)):
            data.qpos[:] = qpos
            mujoco.mj_kinematics(model, data)
            gripper_pos[i] = data.xpos[self.gripper_body]
            gripper_rot[i] = data.xmat[self.gripper_body]
            if not collisions:
                continue
            mujoco.mj_collision(model, data)
            if data.ncon:
                geoms, depth = data.contact.geom[: data.ncon], -data.contact.dist[: data.ncon]  # (C,2), (C,)
                sides = self.side[geoms]  # (C,2)
                with_table = (geoms == self.table).any(1) & (sides > 0).any(1)
                between_arms = (sides[:, 0] > 0) & (sides[:, 1] > 0) & (sides[:, 0] != sides[:, 1])
                table_depth[i] = depth[with_table].max(initial=0.0)
                arm_depth[i] = depth[between_arms].max(initial=0.0)
        tcp = gripper_pos + np.einsum("nkij,j->nki", gripper_rot.reshape(n, 2, 3, 3), np.array(DEFAULT_TCP))
        return {"table_depth": table_depth, "arm_depth": arm_depth, "tcp": tcp}

    # ------------------------------------------------------------------ the check
    def commands(self, actions) -> np.ndarray:
        """(...,K) violations of commanded targets (...,A): arm joints past their range, grippers past 0..1.

        Commands get no margin: a proposed action outside the robot's range is refused as it stands.
        """
        a = _as_numpy(actions)
        if a.shape[-1] != self.spec.action_dim or not np.isfinite(a).all():
            raise ValueError(
                f"actions have shape {a.shape} (need (..., {self.spec.action_dim})) or hold NaN/inf."
            )
        flags = np.zeros(a.shape[:-1] + (len(VIOLATIONS),), dtype=bool)
        arm, grip, m = self.arm, self.grippers, self.cfg.gripper_command_margin
        eps = 1e-6  # float rounding of a target set exactly at a limit
        flags[..., _COL["joint_position"]] = (
            (a[..., arm] < self.lower[arm] - eps) | (a[..., arm] > self.upper[arm] + eps)
        ).any(-1)
        flags[..., _COL["gripper_range"]] = ((a[..., grip] < -m) | (a[..., grip] > 1 + m)).any(-1)
        return flags

    def check(
        self,
        states,
        dt: float,
        actions=None,
        env_states=None,
        collisions: bool | None = None,
        geometry: dict[str, np.ndarray] | None = None,
    ) -> Violations:
        """Violations of states (B,T,S) sampled every `dt` s; actions (B,T,A), env_states (B,T,7n) if any.

        `geometry` may pass `self.geometry` of the same (B*T) states, computed earlier (a streaming caller
        keeps it per step instead of recomputing a window).
        """
        q, a, e = self._validated(states, dt, actions, env_states)
        cfg = self.cfg
        B, T, _ = q.shape
        flags = np.zeros((B, T, len(VIOLATIONS)), dtype=bool)
        col = _COL
        arm, grip = self.arm, self.grippers

        lo, hi = self.lower[arm] - cfg.position_margin, self.upper[arm] + cfg.position_margin
        flags[..., col["joint_position"]] = ((q[..., arm] < lo) | (q[..., arm] > hi)).any(-1)
        if a is not None:
            flags |= self.commands(a)
        glo, ghi = np.array(self.spec.gripper_state_range).T
        flags[..., col["gripper_range"]] |= ((q[..., grip] < glo) | (q[..., grip] > ghi)).any(-1)
        # Velocities and accelerations averaged over the spec's window (k steps), as its limits are.
        k = max(1, round(self.spec.limit_window / dt))
        span = k * dt
        if k < T:  # velocity at step t: from t-k to t
            velocity = np.abs(q[:, k:] - q[:, :-k]) / span  # (B,T-k,S)
            flags[:, k:, col["joint_velocity"]] = (velocity > self.velocity).any(-1)
        if 2 * k < T:  # acceleration at step t: around t-k..t+k, flagged at t
            acceleration = np.abs(q[:, 2 * k :] - 2 * q[:, k:-k] + q[:, : -2 * k]) / span**2  # (B,T-2k,S)
            flags[:, k:-k, col["joint_acceleration"]] = (acceleration > self.acceleration).any(-1)

        run_collisions = cfg.collisions if collisions is None else collisions
        if run_collisions or e is not None:
            geo = geometry or self.geometry(q.reshape(B * T, -1), collisions=run_collisions)
            if run_collisions:
                flags[..., col["arm_table_collision"]] = (geo["table_depth"] > cfg.collision_depth).reshape(
                    B, T
                )
                flags[..., col["arm_arm_collision"]] = (geo["arm_depth"] > cfg.collision_depth).reshape(B, T)
            if e is not None:
                tcp = geo["tcp"].reshape(B, T, 2, 3)
                for k in range(e.shape[-1] // 7):
                    pose = e[..., 7 * k : 7 * k + 7]
                    self._check_object(
                        flags, col, pose[..., :3], tcp, self.resting_height(k, pose[..., 3:]), dt
                    )
        return Violations(flags)

    def _validated(self, states, dt: float, actions, env_states):
        """The trajectory as float arrays (states, actions or None, env_states or None), or a one-line error
        naming the input at fault."""
        q = _as_numpy(states)
        if q.ndim != 3 or q.shape[-1] != self.spec.state_dim:
            raise ValueError(
                f"states have shape {q.shape}; expected (B, T, {self.spec.state_dim}) for robot "
                f"'{self.spec.name}'."
            )
        if not dt > 0:
            raise ValueError(f"dt={dt} must be the time (s) between consecutive states, > 0.")
        a = _as_numpy(actions)
        if a is not None and a.shape != q.shape[:2] + (self.spec.action_dim,):
            raise ValueError(
                f"actions have shape {a.shape}; expected {q.shape[:2] + (self.spec.action_dim,)}."
            )
        e = _as_numpy(env_states)
        if e is not None and (e.shape[:2] != q.shape[:2] or e.shape[-1] % 7):
            raise ValueError(f"env_states have shape {e.shape}; expected {q.shape[:2]} + (7 per object,).")
        for name, x in (("states", q), ("actions", a), ("env_states", e)):
            if x is not None and not np.isfinite(x).all():
                raise ValueError(f"{name} contain NaN or inf; the checker needs finite trajectories.")
        return q, a, e

    def _check_object(self, flags, col, p: np.ndarray, tcp: np.ndarray, rest: np.ndarray, dt: float) -> None:
        """Object rules for positions p (B,T,3), grasp points tcp (B,T,2,3), resting heights rest (B,T)."""
        cfg = self.cfg
        (x0, y0), (x1, y1) = self.table_xy
        over_table = (p[..., 0] >= x0) & (p[..., 0] <= x1) & (p[..., 1] >= y0) & (p[..., 1] <= y1)
        height = p[..., 2] - rest  # (B,T) above the resting height
        held = (np.linalg.norm(tcp - p[..., None, :], axis=-1) < cfg.contact_distance).any(-1)  # (B,T)

        # Below: sunk into the table with no gripper pressing it (a gripper can push a cube ~1 cm into it).
        flags[..., col["object_below_table"]] |= over_table & (height < -cfg.below_table_depth) & ~held

        # Floating: up, unheld, for longer than a fall from where it was let go (plus a grace for bounces).
        airborne = over_table & (height > cfg.lift_height) & ~held
        B, T = airborne.shape
        run = np.zeros(B)  # seconds airborne and unheld so far
        drop = np.zeros(B)  # height at the start of the current airborne run
        for t in range(T):
            starting = airborne[:, t] & (run == 0)
            drop = np.where(starting, height[:, t], drop)
            run = np.where(airborne[:, t], run + dt, 0.0)
            fall_time = np.sqrt(2 * np.maximum(drop, 0) / GRAVITY)
            flags[:, t, col["object_floating"]] |= airborne[:, t] & (run - dt > fall_time + cfg.float_grace)

        if T >= 2:
            step = np.diff(p, axis=1)  # (B,T-1,3) from t-1 to t
            speed = np.linalg.norm(step, axis=-1) / dt
            near_table = over_table[:, 1:] & over_table[:, :-1]
            flags[:, 1:, col["object_teleport"]] |= near_table & (speed > cfg.teleport_speed)
            slide = np.linalg.norm(step[..., :2], axis=-1) / dt  # (B,T-1) horizontal speed into step t
            # Untouched at t-1 and t, yet faster by a jump: friction and landing only ever slow an object.
            gain = np.diff(slide, axis=1, prepend=slide[:, :1] * 0)  # (B,T-1); from rest at the first step
            untouched = ~held[:, 1:] & ~held[:, :-1]
            jump = near_table & untouched & (gain > cfg.teleport_speed_change)
            flags[:, 1:, col["object_teleport"]] |= jump
            resting = (height < cfg.lift_height) & over_table & ~held  # (B,T) on the table, untouched
            # Speeding up on the table from t-1 to t with nothing touching it at t-2, t-1 or t.
            quiet = (
                resting[:, 1:] & resting[:, :-1] & np.concatenate([resting[:, :1], resting[:, :-2]], axis=1)
            )
            flags[:, 1:, col["object_unpushed"]] |= (
                quiet & (slide > cfg.slide_speed) & (gain > cfg.slide_speed / 2)
            )
