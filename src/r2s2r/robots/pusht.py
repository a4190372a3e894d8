"""The PushT reference world (gym-pusht): a second, 2-D embodiment beside ALOHA.

gym-pusht supplies the physics (pymunk: a kinematic disc under PD control pushes a T-shaped block inside
four walls; with the space's damping at 0 no velocity survives a substep, so the T stops as soon as it is
no longer pushed), the goal pose and the coverage reward. As `AlohaWorld` does for
gym-aloha, we drive its env objects directly rather than through `gym.make`: the initial block pose is
explicit, several episodes step in lockstep, and frames are drawn only when asked, at the configured size.

Units are gym-pusht's: positions in the pixels of its 512x512 drawing (x right, y down), angles in radians.
`observation.environment_state` is the block's pose (x, y, angle) as gym-pusht's `state` observation gives
it (the pymunk body origin: the middle of the T's bar top edge; angle wrapped to [0, 2pi)), in the same
frame as the goal pose (256, 256, pi/4). The scripted pusher is `make_pusher` below; what it reaches is
measured in `ScriptedPusher`'s docstring.

The world model never imports this module: it only sees what the recorder writes from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# gym-pusht draws on a pygame Surface (no window), but pygame may still probe for a display: keep it off any
# X server, and quiet its import banner.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import pygame  # noqa: E402
from gym_pusht.envs.pusht import PushTEnv  # noqa: E402

from r2s2r.robots.aloha import StepResult  # noqa: E402
from r2s2r.robots.spec import (  # noqa: E402
    PUSHT_ARENA,
    PUSHT_EPISODE_LENGTH,
    PUSHT_OOD_MARGIN,
    EmbodimentSpec,
    pusht_spec,
)

GOAL_POSE = (256.0, 256.0, np.pi / 4)  # gym-pusht's fixed goal: block x, y, angle
SUCCESS_COVERAGE = 0.95  # gym-pusht's success threshold on coverage
# gym-pusht's own reset draws the block origin from this box (any angle); OOD poses lie in a ring around it.
ID_BOX = ((100.0, 400.0), (100.0, 400.0))
AGENT_CORNERS = np.array([[60.0, 60.0], [452.0, 60.0], [60.0, 452.0], [452.0, 452.0]])


@dataclass
class PushTConfig:
    """What the PushT reference world simulates and how it is observed."""

    cameras: tuple[str, ...] = ("top",)  # views rendered every step (PushT has one: the top-down drawing)
    image_height: int = 96  # rendered image height in pixels
    image_width: int = 96  # rendered image width in pixels
    num_envs: int = 4  # episodes simulated in lockstep (the recorder's batch)
    episode_length: int = PUSHT_EPISODE_LENGTH  # steps per episode (gym-pusht's TimeLimit: 300 at 10 Hz)
    ood_margin: float = PUSHT_OOD_MARGIN  # width (world units) of the OOD ring around the ID box

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise ValueError(f"num_envs={self.num_envs} must be >= 1.")
        if self.image_height < 8 or self.image_width < 8:
            raise ValueError(
                f"image size {self.image_height}x{self.image_width} is too small; use at least 8x8."
            )
        if self.episode_length < 1:
            raise ValueError(f"episode_length={self.episode_length} must be >= 1.")
        if not 0 < self.ood_margin <= 90:
            raise ValueError(
                f"ood_margin={self.ood_margin} must be in (0, 90]: the ring must stay in the arena."
            )
        self.cameras = tuple(self.cameras)

    @property
    def object_pose_dim(self) -> int:
        return 3


def in_id_box(poses: np.ndarray) -> np.ndarray:
    """Whether block poses (..., 3: x, y, angle) lie in gym-pusht's own sampling box."""
    poses = np.asarray(poses, dtype=float)
    (x0, x1), (y0, y1) = ID_BOX
    x, y = poses[..., 0], poses[..., 1]
    return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)


def sample_object_poses(
    distribution: str, rng: np.random.Generator, n: int, ood_margin: float = PUSHT_OOD_MARGIN
) -> np.ndarray:
    """Initial block poses (n, 3): x, y, angle.

    `id` samples gym-pusht's own reset box (origin in [100, 400]^2, angle uniform in [-pi, pi)); `ood`
    samples the ring of width `ood_margin` around it, uniformly over its area, with any angle.
    """
    if distribution not in ("id", "ood"):
        raise ValueError(f"distribution='{distribution}' must be 'id' or 'ood'.")
    (x0, x1), (y0, y1) = ID_BOX
    poses = np.zeros((n, 3))
    for k in range(n):
        if distribution == "id":
            x, y = rng.uniform(x0, x1), rng.uniform(y0, y1)
        else:  # rejection sampling on the ring
            while True:
                x = rng.uniform(x0 - ood_margin, x1 + ood_margin)
                y = rng.uniform(y0 - ood_margin, y1 + ood_margin)
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    break
        poses[k] = [x, y, rng.uniform(-np.pi, np.pi)]
    return poses


class PushTWorld:
    """Several gym-pusht physics instances stepped in lockstep, drawn at the configured size.

    Example:
        world = PushTWorld(PushTConfig(num_envs=4))
        obs = world.reset(sample_object_poses("id", rng, 4))
        result = world.step(actions)  # actions (4, 2): the agent's target position, 0..512
    """

    def __init__(self, cfg: PushTConfig):
        self.cfg = cfg
        self.spec: EmbodimentSpec = self.spec_for(cfg)
        self.envs = [PushTEnv(obs_type="state", render_mode="rgb_array") for _ in range(cfg.num_envs)]
        self._t = 0

    @staticmethod
    def spec_for(cfg: PushTConfig) -> EmbodimentSpec:
        """The robot spec of the world `cfg` describes; checks its cameras exist, builds no physics."""
        spec = pusht_spec()
        unknown = [c for c in cfg.cameras if c not in spec.cameras]
        if unknown:
            raise ValueError(f"Unknown camera(s) {unknown} for PushT; available: {', '.join(spec.cameras)}.")
        return spec

    # ---------------------------------------------------------------- rendering
    def render(self) -> dict[str, np.ndarray]:
        """Every configured camera of every env: `observation.images.top` -> (B,H,W,3) uint8."""
        size = (self.cfg.image_width, self.cfg.image_height)
        frames = []
        for env in self.envs:
            # gym-pusht's `_draw` is the 512x512 scene its pixel observations are resized from; its public
            # `render()` also stamps the last action as a cross, which a camera would not see.
            screen = env._draw()
            img = np.transpose(np.array(pygame.surfarray.pixels3d(screen)), (1, 0, 2))  # pygame is (W,H,3)
            frames.append(cv2.resize(img, size, interpolation=cv2.INTER_AREA))
        images = np.stack(frames).astype(np.uint8)
        return {f"observation.images.{cam}": images for cam in self.cfg.cameras}

    # ---------------------------------------------------------------- state
    def state(self) -> np.ndarray:
        """Proprio (B,2): the agent's position."""
        return np.stack([np.array(env.agent.position) for env in self.envs]).astype(np.float32)

    def environment_state(self) -> np.ndarray:
        """Block poses (B,3): x, y, angle in [0, 2pi), as gym-pusht's `state` observation."""
        poses = [[*env.block.position, env.block.angle % (2 * np.pi)] for env in self.envs]
        return np.asarray(poses, dtype=np.float32)

    def coverage(self) -> np.ndarray:
        """(B,) fraction of the goal T the block covers (gym-pusht's reward before its 0.95 scaling)."""
        return np.array([env._get_coverage() for env in self.envs])

    def observe(self, render: bool = True) -> dict[str, np.ndarray]:
        obs = {
            "observation.state": self.state(),
            "observation.environment_state": self.environment_state(),
        }
        if render:
            obs.update(self.render())
        return obs

    # ---------------------------------------------------------------- episode
    def reset(
        self, object_poses: np.ndarray, render: bool = True, agent_positions: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Start one episode per env from explicit block poses (B,3) and, optionally, agent positions (B,2).

        Without `agent_positions` the agent starts in the arena corner farthest from the block, clear of it.
        """
        object_poses = np.asarray(object_poses, dtype=float)
        expected = (self.cfg.num_envs, 3)
        if object_poses.shape != expected:
            raise ValueError(
                f"object_poses has shape {object_poses.shape}, expected {expected} (num_envs, x y angle)."
            )
        if agent_positions is None:
            far = np.linalg.norm(AGENT_CORNERS[None] - object_poses[:, None, :2], axis=-1).argmax(1)
            agent_positions = AGENT_CORNERS[far]
        agent_positions = np.asarray(agent_positions, dtype=float)
        if agent_positions.shape != (self.cfg.num_envs, 2):
            raise ValueError(
                f"agent_positions has shape {agent_positions.shape}, expected ({self.cfg.num_envs}, 2)."
            )
        for env, pose, agent in zip(self.envs, object_poses, agent_positions, strict=True):
            # A fresh space (walls, agent, block, goal) with the agent and block near where they belong, never
            # at gym-pusht's random start: a random start overlapping them leaves contacts that push the
            # block on the next physics step.
            env.reset(options={"reset_to_state": np.concatenate([agent, pose])})
            env.agent.position = agent.tolist()
            env.agent.velocity = (0.0, 0.0)
            # Angle first, then position: pymunk rotates about the centre of gravity, so this order puts the
            # body origin exactly at (x, y) (gym-pusht's `reset_to_state` does the reverse, for old data).
            env.block.angle = float(pose[2])
            env.block.position = pose[:2].tolist()
            env.block.velocity, env.block.angular_velocity = (0.0, 0.0), 0.0
            # Move the shapes with their bodies without a physics step, so the block starts exactly at the
            # asked pose (a T through a wall, which gym-pusht's box allows, is pushed out on the first step).
            env.space.reindex_shapes_for_body(env.agent)
            env.space.reindex_shapes_for_body(env.block)
        self._t = 0
        return self.observe(render)

    def step(self, actions: np.ndarray, render: bool = True) -> StepResult:
        """Apply one target position per env for one control period (1/10 s) and observe the result."""
        actions = self.spec.checked_actions(
            actions, self.cfg.num_envs, "one 2-D target position (x, y in 0..512) of the agent per env"
        )
        actions = np.clip(actions, 0.0, PUSHT_ARENA)  # gym-pusht's action space
        coverage = np.zeros(self.cfg.num_envs)
        for i, env in enumerate(self.envs):
            _, _, _, _, info = env.step(actions[i])
            coverage[i] = info["coverage"]
        self._t += 1
        reward = np.clip(coverage / SUCCESS_COVERAGE, 0.0, 1.0)  # gym-pusht's reward
        info = {"t": self._t, "coverage": coverage, "done": self._t >= self.cfg.episode_length}
        return StepResult(self.observe(render), reward, coverage > SUCCESS_COVERAGE, info)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __enter__(self) -> PushTWorld:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- scripted pusher
T_COG = np.array([0.0, 45.0])  # the T's centre of gravity in its body frame (mean of its bars' centroids)
NAV_RADIUS = 105.0  # circle around the centre of gravity the agent travels on: the T reaches 77, the agent 15
PUSH_STEP = 40.0  # how far ahead of the agent (world units) a push sets its target each step
POS_TOL, ANGLE_TOL = 5.0, 0.05  # pose error the pusher accepts before it moves on (units, rad)


def _rot(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


def _wrap(angle: float) -> float:
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


class _PushScript:
    """One env's pusher: translate the T onto the goal through its centre of gravity, then turn it.

    A push has a contact in the T's body frame: translations approach from behind the centre of gravity and
    push towards the goal; turns press on the bar's top face 45 units off centre, along the stem. Between
    pushes the agent travels round the T on a circle of radius NAV_RADIUS, so it never sweeps across it.
    """

    def __init__(self, rng: np.random.Generator, noise: float):
        self.rng, self.noise = rng, noise
        self.contact: tuple | None = None  # while pushing: ("move", 0, 0) or ("turn", sense +-1, face +-1)
        self.steps = 0

    def act(self, agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
        xy, angle = pose[:2].astype(float), float(pose[2])
        cog = xy + _rot(angle) @ T_COG
        error, turn = np.asarray(GOAL_POSE[:2]) - xy, _wrap(GOAL_POSE[2] - angle)
        if self.contact is not None and not self._keep_pushing(agent, xy, angle, cog, error, turn):
            self.contact = None
        if self.contact is None:
            if np.linalg.norm(error) > POS_TOL:
                kind = ("move", 0.0, 0.0)
            elif abs(turn) > ANGLE_TOL:  # press on the face whose push also moves the T towards the goal
                face = 1.0 if (_rot(angle) @ np.array([0.0, 1.0])) @ error >= 0 else -1.0
                kind = ("turn", float(np.sign(turn)), face)
            else:
                return self._noisy(agent)  # on the goal: hold still
            approach, _ = self._contact(kind, xy, angle, cog, error)
            approach = np.clip(approach, 25.0, PUSHT_ARENA - 25.0)  # near a wall: as close as it can get
            if np.linalg.norm(agent - approach) > 10.0:
                return self._noisy(self._travel(agent, cog, approach))
            self.contact, self.steps = kind, 0
        _, direction = self._contact(self.contact, xy, angle, cog, error)
        self.steps += 1
        if self.contact[0] == "turn":
            return self._noisy(agent + direction * PUSH_STEP / 4)
        # Move: push along the line through the centre of gravity, steering back onto it as the T slides.
        offset = agent - cog
        drift = offset - (offset @ direction) * direction
        reach = min(PUSH_STEP, max(5.0, float(np.linalg.norm(error))))
        return self._noisy(agent + direction * reach - 0.5 * drift)

    def _contact(self, kind, xy, angle, cog, error) -> tuple[np.ndarray, np.ndarray]:
        """(where the agent waits before the push, the push direction), in world coordinates."""
        if kind[0] == "move":
            direction = error / max(np.linalg.norm(error), 1e-6)
            return cog - direction * (NAV_RADIUS - 12.0), direction
        # Turning: the bar's top face (y = 0 in the body frame) pushed along +y 45 units right of centre turns
        # the T one way, 45 units left the other; its bottom face (y = 30) pushed along -y mirrors that.
        rot, sign, face = _rot(angle), kind[1], kind[2]
        local = np.array([45.0 * sign, -23.0]) if face > 0 else np.array([-45.0 * sign, 53.0])
        return xy + rot @ local, rot @ np.array([0.0, face])

    def _keep_pushing(self, agent, xy, angle, cog, error, turn) -> bool:
        if self.steps >= 30:
            return False
        if self.contact[0] == "move":
            direction = error / max(np.linalg.norm(error), 1e-6)
            offset = agent - cog
            off_line = abs(offset[0] * direction[1] - offset[1] * direction[0])
            return np.linalg.norm(error) > POS_TOL / 2 and off_line < 25.0 and offset @ direction < 0
        local = _rot(angle).T @ (agent - xy)
        sign, face = self.contact[1], self.contact[2]
        on_face = abs(local[0] - 45.0 * sign * face) < 25.0 and (
            local[1] < 5.0 if face > 0 else local[1] > 25.0
        )
        return on_face and abs(turn) > ANGLE_TOL / 2 and np.sign(turn) == self.contact[1]

    def _travel(self, agent: np.ndarray, cog: np.ndarray, target: np.ndarray) -> np.ndarray:
        """A step towards `target` that goes round the T rather than through it."""
        offset, goal_offset = agent - cog, target - cog
        here, there = np.arctan2(offset[1], offset[0]), np.arctan2(goal_offset[1], goal_offset[0])
        gap = _wrap(there - here)
        if abs(gap) < 0.2 or np.linalg.norm(target - agent) < 40.0:  # on the right side: go straight in
            step = target - agent
            return agent + step * min(1.0, 25.0 / max(np.linalg.norm(step), 1e-6))
        if np.linalg.norm(offset) < NAV_RADIUS - 15.0:  # too close to turn round it: back off first
            return cog + offset / max(np.linalg.norm(offset), 1e-6) * (NAV_RADIUS + 10.0)
        heading = here + np.clip(gap, -0.4, 0.4)
        return cog + NAV_RADIUS * np.array([np.cos(heading), np.sin(heading)])

    def _noisy(self, target: np.ndarray) -> np.ndarray:
        if self.noise > 0:
            target = target + self.rng.normal(0.0, self.noise, 2)
        return np.clip(target, 20.0, PUSHT_ARENA - 20.0)


class ScriptedPusher:
    """A scripted PushT policy (`reset()`, `select_action(batch) -> (B, 2)` target positions).

    Reads `observation.state` (B,2) agent position and `observation.environment_state` (B,3) block pose.
    Each env runs its own `_PushScript` with its own generator, seeded from `seed` and the bytes of that env's
    first block pose, so an episode's actions do not depend on the other episodes in its batch. Call
    `reset()` before every new episode.

    Measured over 300-step episodes (gym-pusht's length), 64 block poses drawn by
    `sample_object_poses(..., np.random.default_rng(123), 64)`, agent starting in the far corner, seed 0:

        poses  noise  coverage at start  final  best in episode  success (>0.95 at any step)  idle final
        id     0      0.07               0.61   0.67             5%                           0.07
        id     5      0.07               0.56   0.66             8%                           0.07
        ood    0      0.01               0.38   0.43             3%                           0.01

    ("idle" holds the agent still.) It brings the T near the goal but rarely into gym-pusht's 95% success:
    it aims for 5 units / 0.05 rad, a point pusher slips, and a T near a wall cannot be approached from
    behind. Good enough to fill a dataset with varied partial successes; not an expert.
    """

    def __init__(self, seed: int = 0, noise: float = 0.0):
        self.seed, self.noise = seed, noise
        self.scripts: list[_PushScript] | None = None

    def reset(self) -> None:
        self.scripts = None

    def select_action(self, batch: dict) -> np.ndarray:
        agent = np.asarray(_numpy(batch["observation.state"]), dtype=float)
        poses = np.asarray(_numpy(batch["observation.environment_state"]), dtype=float)
        if poses.ndim != 2 or poses.shape[1] != 3 or agent.shape != (poses.shape[0], 2):
            raise ValueError(
                f"observation.state {agent.shape} / environment_state {poses.shape}: "
                "expected (B, 2) / (B, 3)."
            )
        if self.scripts is None or len(self.scripts) != len(poses):
            self.scripts = [self._script(p) for p in poses]
        actions = [s.act(a, p) for s, a, p in zip(self.scripts, agent, poses, strict=True)]
        return _like(np.stack(actions).astype(np.float32), batch["observation.state"])

    def _script(self, first_pose: np.ndarray) -> _PushScript:
        entropy = [self.seed, *np.frombuffer(first_pose.astype(np.float32).tobytes(), dtype=np.uint32)]
        return _PushScript(np.random.default_rng(np.random.SeedSequence(entropy)), self.noise)


def _numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _like(actions: np.ndarray, reference):
    """Actions as a tensor when the batch holds tensors (the policy interface), else as an array."""
    if hasattr(reference, "detach"):
        import torch

        return torch.from_numpy(actions).to(reference.device)
    return actions


def make_pusher(seed: int = 0, noise: float = 0.0) -> ScriptedPusher:
    """A scripted PushT pusher; `noise` is the std (world units) of Gaussian noise on every target.

    JSON-friendly arguments, for `--policy.path=r2s2r.robots.pusht:make_pusher --policy.kwargs='{...}'`.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number >= 0 (it seeds numpy's SeedSequence).")
    if not noise >= 0:
        raise ValueError(f"noise={noise!r} must be >= 0 (std of the target noise, world units).")
    return ScriptedPusher(seed=seed, noise=float(noise))
