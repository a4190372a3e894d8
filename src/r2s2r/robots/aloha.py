"""The MuJoCo ALOHA reference world: our stand-in for hardware.

gym-aloha supplies the physics (MJCF, actuators, gripper mapping) and the staged rewards of its
transfer-cube and insertion tasks; we drive those task objects directly instead of through `AlohaEnv`,
because `AlohaEnv` renders three 480x640 views on every step whatever is asked and samples the object
pose through a module-level global. Here the initial object pose is explicit, several episodes step in
lockstep, and only the requested cameras are rendered, offscreen, at a small size.

The world model never imports this module: it only sees what the recorder writes from it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

# MuJoCo picks its GL backend at import time; offscreen EGL works headless (OSMesa is the fallback:
# MUJOCO_GL=osmesa). Torch and triton (which torchvision pulls in later through torch._dynamo) must be
# loaded before MuJoCo pulls in Mesa: loaded after it, triton's import segfaults the process.
os.environ.setdefault("MUJOCO_GL", "egl")
import torch  # noqa: F401, E402  (import order matters, see above)

try:  # noqa: SIM105
    import triton  # noqa: F401
except ImportError:  # CPU-only torch builds ship without triton: nothing to pre-load
    pass

# isort: split

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from dm_control import mujoco as dm_mujoco  # noqa: E402
from dm_control.rl.control import PhysicsError  # noqa: E402
from gym_aloha import constants as aloha_constants  # noqa: E402
from gym_aloha.tasks import sim as aloha_sim  # noqa: E402

from r2s2r.robots.spec import PUSHT_OOD_MARGIN, EmbodimentSpec, aloha_spec, pusht_spec  # noqa: E402

ALOHA_TASKS = ("transfer_cube", "insertion")  # the tasks this module's AlohaWorld simulates
# Every task a WorldConfig names; pusht is gym-pusht's world (robots/pusht.py). robots/worlds.py builds both.
TASKS = (*ALOHA_TASKS, "pusht")
TASK_TEXT = {
    "transfer_cube": "Pick up the cube with the right arm and hand it over to the left arm.",
    "insertion": "Pick up the peg and the socket with both arms and insert the peg into the socket.",
    "pusht": "Push the T-shaped block onto the T-shaped goal.",
}
ALOHA_CAMERAS = ("top", "left_wrist", "right_wrist")  # WorldConfig's default views
ALOHA_OOD_MARGIN = 0.05  # WorldConfig's default OOD ring width (m)
# The standard sampling boxes of gym_aloha.utils (x, y ranges in metres; z fixed on the table).
ID_BOXES = {
    "transfer_cube": [((0.0, 0.2), (0.4, 0.6))],
    "insertion": [((0.1, 0.2), (0.4, 0.6)), ((-0.2, -0.1), (0.4, 0.6))],  # peg, socket
}
OBJECT_Z = 0.05
log = logging.getLogger(__name__)


@dataclass
class WorldConfig:
    """What the reference world simulates and how it is observed.

    The flags are ALOHA's; with `task="pusht"` two of them left at ALOHA's defaults stand for PushT's own:
    the cameras become ("top",), PushT's only one, and the OOD ring 40 world units wide (gym-pusht's 512x512
    drawing's pixels) instead of 0.05 m.
    """

    task: str = "transfer_cube"  # transfer_cube | insertion (ALOHA) | pusht (gym-pusht's 2-D pusher)
    cameras: tuple[str, ...] = ALOHA_CAMERAS  # views rendered every step; pusht has top only (its default)
    image_height: int = 96  # rendered image height in pixels
    image_width: int = 128  # rendered image width in pixels
    num_envs: int = 4  # episodes simulated in lockstep (the recorder's batch)
    ood_margin: float = ALOHA_OOD_MARGIN  # OOD ring width around the ID box, m; pusht: units, 0.05 means 40

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown task '{self.task}'. Known tasks: {', '.join(TASKS)}.")
        if self.num_envs < 1:
            raise ValueError(f"num_envs={self.num_envs} must be >= 1.")
        if self.image_height < 8 or self.image_width < 8:
            raise ValueError(
                f"image size {self.image_height}x{self.image_width} is too small; use at least 8x8."
            )
        self.cameras = tuple(self.cameras)
        if self.task == "pusht":
            self._read_as_pusht()

    def _read_as_pusht(self) -> None:
        """ALOHA's default cameras and OOD margin become PushT's; a camera PushT lacks is refused."""
        spec = pusht_spec()
        if self.cameras == ALOHA_CAMERAS:
            self.cameras = spec.default_cameras
        if self.ood_margin == ALOHA_OOD_MARGIN:
            self.ood_margin = PUSHT_OOD_MARGIN
        unknown = [c for c in self.cameras if c not in spec.cameras]
        if unknown:
            raise ValueError(
                f"--world.cameras=[{','.join(self.cameras)}]: pusht has no camera {','.join(unknown)}, only "
                f"{','.join(spec.cameras)}; pass --world.cameras=[top] or leave the flag out."
            )

    @property
    def object_pose_names(self) -> list[str]:
        """One name per value of `observation.environment_state`: the free objects' poses."""
        if self.task == "pusht":
            return ["block_x", "block_y", "block_angle"]
        axes = ("x", "y", "z", "qw", "qx", "qy", "qz")
        return [f"obj{o}_{c}" for o in range(len(ID_BOXES[self.task])) for c in axes]

    @property
    def object_pose_dim(self) -> int:
        return len(self.object_pose_names)


def in_id_box(task: str, xy: np.ndarray) -> np.ndarray:
    """Whether objects at `xy` (..., 2 * n_objects: x, y of each object) all lie in their ID boxes."""
    xy = np.asarray(xy, dtype=float)
    boxes = ID_BOXES[task]
    if xy.shape[-1] != 2 * len(boxes):
        raise ValueError(
            f"xy has {xy.shape[-1]} values per row; {task} needs x, y of {len(boxes)} object(s)."
        )
    inside = np.ones(xy.shape[:-1], dtype=bool)
    for i, ((x0, x1), (y0, y1)) in enumerate(boxes):
        x, y = xy[..., 2 * i], xy[..., 2 * i + 1]
        inside &= (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
    return inside


def sample_object_poses(
    task: str, distribution: str, rng: np.random.Generator, n: int, ood_margin: float = 0.05
) -> np.ndarray:
    """Initial object poses (n, 7 * n_objects): position + identity quaternion per object.

    `id` samples gym-aloha's own box; `ood` samples the ring of width `ood_margin` around it (every object
    outside its box, still on the table and within both arms' reach).
    """
    if distribution not in ("id", "ood"):
        raise ValueError(f"distribution='{distribution}' must be 'id' or 'ood'.")
    boxes = ID_BOXES[task]
    poses = np.zeros((n, 7 * len(boxes)))
    for i, ((x0, x1), (y0, y1)) in enumerate(boxes):
        for k in range(n):
            if distribution == "id":
                x, y = rng.uniform(x0, x1), rng.uniform(y0, y1)
            else:  # rejection sampling on the ring: uniform over its area
                while True:
                    x = rng.uniform(x0 - ood_margin, x1 + ood_margin)
                    y = rng.uniform(y0 - ood_margin, y1 + ood_margin)
                    if not (x0 <= x <= x1 and y0 <= y <= y1):
                        break
            poses[k, 7 * i : 7 * i + 7] = [x, y, OBJECT_Z, 1.0, 0.0, 0.0, 0.0]
    return poses


@dataclass
class StepResult:
    """What one lockstep step returns: LeRobot-keyed observations and per-env labels."""

    observation: dict[str, np.ndarray]  # `observation.images.<cam>` (B,H,W,3) uint8, state (B,14) ...
    reward: np.ndarray  # (B,) staged task reward, 0..max_reward
    success: np.ndarray  # (B,) bool, reward == max_reward at this step
    info: dict = field(default_factory=dict)  # "t"; "stopped" (B,) bool: envs halted by a physics fault


class AlohaWorld:
    """Several gym-aloha physics instances stepped in lockstep, rendered offscreen.

    An env whose physics goes unstable (MuJoCo's NaN / huge-acceleration warnings, e.g. under a policy's
    violent commands) is stopped the way a robot's e-stop would: rolled back to its last valid state and
    held there, reward 0, until the next reset; the other envs of the batch go on.

    Example:
        world = AlohaWorld(WorldConfig(num_envs=4))
        obs = world.reset(sample_object_poses("transfer_cube", "id", rng, 4))
        result = world.step(actions)  # actions (4, 14): absolute joint targets, grippers 0..1
    """

    def __init__(self, cfg: WorldConfig):
        self.cfg = cfg
        xml = aloha_constants.ASSETS_DIR / f"bimanual_viperx_{cfg.task}.xml"
        self.spec: EmbodimentSpec = self.spec_for(cfg)
        task_cls = aloha_sim.TransferCubeTask if cfg.task == "transfer_cube" else aloha_sim.InsertionTask
        self.physics = [dm_mujoco.Physics.from_xml_path(str(xml)) for _ in range(cfg.num_envs)]
        self.tasks = [task_cls() for _ in range(cfg.num_envs)]
        self.max_reward = self.tasks[0].max_reward
        self.n_substeps = int(round(aloha_constants.DT / self.physics[0].model.opt.timestep))
        self._renderer: mujoco.Renderer | None = None
        self._t = 0
        self._stopped = np.zeros(cfg.num_envs, dtype=bool)

    @staticmethod
    def spec_for(cfg: WorldConfig) -> EmbodimentSpec:
        """The robot spec of the world `cfg` describes; checks its cameras exist, builds no physics."""
        if cfg.task not in ALOHA_TASKS:
            raise ValueError(
                f"task '{cfg.task}' is not an ALOHA task ({', '.join(ALOHA_TASKS)}); build its world with "
                "r2s2r.robots.worlds.make_world."
            )
        spec = aloha_spec(aloha_constants.ASSETS_DIR / f"bimanual_viperx_{cfg.task}.xml")
        unknown = [c for c in cfg.cameras if c not in spec.cameras]
        if unknown:
            raise ValueError(f"Unknown camera(s) {unknown} for ALOHA; available: {', '.join(spec.cameras)}.")
        return spec

    # ---------------------------------------------------------------- rendering
    def _get_renderer(self) -> mujoco.Renderer:
        if self._renderer is None:
            model = self.physics[0].model.ptr
            model.vis.quality.offsamples = 0  # no MSAA: 10x faster on a software GL, invisible at 96x128
            model.vis.global_.offheight = max(model.vis.global_.offheight, self.cfg.image_height)
            model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.cfg.image_width)
            self._renderer = mujoco.Renderer(model, self.cfg.image_height, self.cfg.image_width)
        return self._renderer

    def render(self) -> dict[str, np.ndarray]:
        """Every configured camera of every env: `observation.images.<cam>` -> (B,H,W,3) uint8."""
        renderer = self._get_renderer()
        images = {}
        for cam in self.cfg.cameras:
            frames = []
            for physics in self.physics:
                renderer.update_scene(physics.data.ptr, camera=cam)
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0  # shadows cost 10x on CPU GL
                frames.append(renderer.render())
            images[f"observation.images.{cam}"] = np.stack(frames)  # (B,H,W,3)
        return images

    # ---------------------------------------------------------------- state
    def state(self) -> np.ndarray:
        """Proprio (B,14): 6 joint positions + normalized gripper per arm, gym-aloha's `qpos`."""
        return np.stack([aloha_sim.BimanualViperXTask.get_qpos(p) for p in self.physics]).astype(np.float32)

    def environment_state(self) -> np.ndarray:
        """Object poses (B, 7 * n_objects): position + quaternion (w, x, y, z) of each free object."""
        return np.stack([p.data.qpos[16:].copy() for p in self.physics]).astype(np.float32)

    def observe(self, render: bool = True) -> dict[str, np.ndarray]:
        obs = {
            "observation.state": self.state(),
            "observation.environment_state": self.environment_state(),
        }
        if render:
            obs.update(self.render())
        return obs

    # ---------------------------------------------------------------- episode
    def reset(self, object_poses: np.ndarray, render: bool = True) -> dict[str, np.ndarray]:
        """Start one episode per env from explicit initial object poses (B, 7 * n_objects)."""
        object_poses = np.asarray(object_poses, dtype=float)
        expected = (self.cfg.num_envs, self.cfg.object_pose_dim)
        if object_poses.shape != expected:
            raise ValueError(
                f"object_poses has shape {object_poses.shape}, expected {expected} "
                f"(num_envs, 7 per object: x, y, z, qw, qx, qy, qz)."
            )
        for physics, task, pose in zip(self.physics, self.tasks, object_poses, strict=True):
            physics.reset()
            # gym-aloha's tasks read the initial pose from this module-level slot during
            # initialize_episode; we fill it right before each call, so no two envs share it.
            aloha_sim.BOX_POSE[0] = pose
            task.initialize_episode(physics)
        aloha_sim.BOX_POSE[0] = None
        self._t = 0
        self._stopped[:] = False
        return self.observe(render)

    def step(self, actions: np.ndarray, render: bool = True) -> StepResult:
        """Apply one action per env for one control period (1/50 s) and observe the result."""
        actions = self.spec.checked_actions(
            actions,
            self.cfg.num_envs,
            "one 14-D joint-position target per env (6 joints + gripper 0..1 per arm)",
        )
        rewards = np.zeros(self.cfg.num_envs)
        for i, (physics, task) in enumerate(zip(self.physics, self.tasks, strict=True)):
            if not self._stopped[i] and self._step_one(i, physics, task, actions[i]):
                rewards[i] = task.get_reward(physics)
        self._t += 1
        info = {"t": self._t, "stopped": self._stopped.copy()}
        return StepResult(self.observe(render), rewards, rewards >= self.max_reward, info)

    def _step_one(self, i: int, physics: dm_mujoco.Physics, task, action: np.ndarray) -> bool:
        """What dm_control's control.Environment.step does for env `i`, minus the observation it would
        render; on a physics fault the env is rolled back, stopped, and False returned."""
        state = physics.get_state()
        try:
            task.before_step(action, physics)
            physics.step(self.n_substeps)
            task.after_step(physics)
            return True
        except PhysicsError as e:
            with physics.reset_context():
                physics.set_state(state)
            self._stopped[i] = True
            log.warning("env %d stopped at step %d, its episode ends as a failure: %s", i, self._t + 1, e)
            return False

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __enter__(self) -> AlohaWorld:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
