"""Family 3, `camera`: controllers that locate the cube in images and never read its pose.

The policy holds still until the cube has landed (`detect_step`), finds the red blob in the top image
(`vision.detect_red`), back-projects its centroid through the top camera onto the plane of the cube's
centre (`vision.PinholeCamera`), and then acts like `waypoint` on that estimate (yaw 0: a 3-pixel blob
shows no orientation). `observation.environment_state` is never read.

Two options close the loop with the right wrist camera:
- `servo_lag >= 0`: while the gripper comes over the cube and down, every step re-locates the cube in the
  wrist image, back-projected through the wrist camera posed by the measured joint angles, and moves the
  estimate by `servo_gain` of the difference. The image used is `servo_lag` steps old while the joint
  angles are current: camera latency, which misplaces the cube by the distance the camera moved meanwhile.
- `retry`: after the lift, too little red in the wrist view means the hand is empty; the arms go home,
  the top camera looks again and the waypoint plan is replayed once, faster.

Perception errors as kwargs (see `CameraKnobs`): a top camera calibrated at the wrong pose, noise on the
detected centroid, sensor noise and blur in the image, a colour threshold that is too strict, a detection
taken before the cube has landed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import CUBE_HALF, GRIPPER_OPEN, EpisodeBatch, episode_rng, piecewise, smoothstep
from families.vision import PinholeCamera, detect_red
from families.waypoint import WaypointKnobs, WaypointPlan

SERVO_WINDOW = (30, 85)  # nominal waypoint-plan steps during which the wrist camera servos (above, then down)
CHECK_AFTER = 155  # nominal waypoint-plan steps after which the grasp is checked (end of the lift)
HOME_STEPS = 40  # steps to bring the arms back to their start before a retry
RETRY_SPEED = 1.6  # the retry's waypoint plan runs this much faster (it has less time left)
# Red pixels (of 96x128) in the right wrist view that mean "held": ~1900 when the cube is between the
# fingers, <1000 when it is still on the table 12 cm below (measured).
WRIST_HELD_PIXELS = 1400


@dataclass
class CameraKnobs:
    """Perception settings and errors of the camera controller; the defaults are the nominal one."""

    detect_step: int = 10  # step whose top image locates the cube; before ~5 it is still falling
    red_threshold: float = 0.3  # a pixel is red when red - max(green, blue) exceeds this (0..1 units)
    blur: float = 0.0  # px, Gaussian blur applied to the top image before thresholding
    image_noise: float = 0.0  # std of Gaussian noise added to every top-image pixel value (0..1 units)
    pixel_noise: float = 0.0  # px, std of an error drawn afresh for every detected top-image centroid
    calib_dx: float = 0.0  # m, error in the believed top-camera position along world x
    calib_dy: float = 0.0  # m, along world y
    calib_dz: float = 0.0  # m, along world z (a wrong camera height scales every offset)
    calib_tilt_deg: float = 0.0  # degrees of error about the top camera's x axis (shifts estimates in y)
    servo_lag: int = -1  # steps of wrist-camera latency while servoing; -1 = no servoing
    servo_gain: float = 0.3  # fraction of the wrist camera's correction applied per step while servoing
    retry: bool = False  # check the grasp in the right wrist image and retry once when the hand is empty
    speed: float = 1.0  # speed of the waypoint plan (1 = nominal)
    seed: int = 0  # seeds image and centroid noise together with the episode's first top image

    def __post_init__(self) -> None:
        if self.detect_step < 0 or self.servo_lag < -1:
            raise ValueError(
                f"detect_step={self.detect_step} must be >= 0, servo_lag={self.servo_lag} >= -1."
            )
        if not 0 < self.servo_gain <= 1:
            raise ValueError(f"servo_gain={self.servo_gain} must be in (0, 1].")
        if self.speed <= 0:
            raise ValueError(f"speed={self.speed} must be > 0.")

    @property
    def cameras(self) -> tuple[str, ...]:
        """The camera views this setting reads."""
        return ("top", "right_wrist") if self.servo_lag >= 0 or self.retry else ("top",)


class CameraPlan:
    """One episode: wait, locate, play a waypoint plan on the estimate; optionally servo and retry."""

    def __init__(self, policy: CameraPolicy, state: np.ndarray, top_image: np.ndarray):
        self.policy, self.knobs = policy, policy.knobs
        self.state0 = state.astype(float)
        self.rng = episode_rng(self.knobs.seed, top_image)
        self.plan: WaypointPlan | None = None
        self.t0 = 0  # step at which `plan` started
        self.speed = self.knobs.speed
        self.estimate: np.ndarray | None = None  # believed cube centre (3,)
        self.wrist_images: deque = deque()  # the last servo_lag + 1 right wrist images
        self.home: tuple | None = None  # (times, joint angles) of the go-home move before a retry
        self.retried = False
        self.wrist_pixels = -1  # red pixels in the right wrist view at the grasp check; -1 = not checked
        self.estimates: list[np.ndarray] = []  # every estimate the controller planned on (diagnostics)

    def locate(self, image: np.ndarray) -> np.ndarray | None:
        """Believed cube centre (3,) from one top image, or None when no red blob is found."""
        k = self.knobs
        det = detect_red(image, k.red_threshold, k.blur, k.image_noise, self.rng)
        if det is None:
            return None
        noise = self.rng.normal(0.0, k.pixel_noise, 2) if k.pixel_noise else 0.0
        row, col = np.asarray(det[:2]) + noise
        return self.policy.top_camera.to_plane(row, col, CUBE_HALF)

    def _start(self, t: int, speed: float, retarget: bool = False) -> None:
        cube = np.concatenate([self.estimate, [1.0, 0.0, 0.0, 0.0]])
        plan = WaypointPlan(
            WaypointKnobs(speed=speed), self.policy.left, self.policy.right, self.state0, cube
        )
        if retarget:  # the same motion towards a corrected goal: keep the IK warm starts
            plan.q_left, plan.q_right = self.plan.q_left, self.plan.q_right
        self.plan, self.t0, self.speed = plan, t, speed
        self.estimates.append(self.estimate.copy())

    def _hold(self) -> np.ndarray:
        s = self.state0
        return np.concatenate([s[:6], [GRIPPER_OPEN], s[7:13], [GRIPPER_OPEN]])

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        k = self.knobs
        state = batch["observation.state"][b]
        if self.plan is None:  # 1. wait for the cube to land, then look until it is found
            if t >= k.detect_step:
                self.estimate = self.locate(batch["observation.images.top"][b])
                if self.estimate is not None:
                    self._start(t, self.speed)
            if self.plan is None:
                return self._hold()
        if k.servo_lag >= 0 and self.home is None and not self.retried:  # 2. optionally servo
            self._servo(t, batch["observation.images.right_wrist"][b], state)
        if k.retry and not self.retried and t - self.t0 == int(CHECK_AFTER / self.speed):
            self._check_grasp(t, batch["observation.images.right_wrist"][b], state)
        if self.home is not None:  # 3. going home, then look again and replan
            times, poses = self.home
            if t < times[-1]:
                q = piecewise(times, poses, t, smoothstep)
                return np.concatenate([q[:6], [GRIPPER_OPEN], q[6:], [GRIPPER_OPEN]])
            self.estimate = self.locate(batch["observation.images.top"][b])
            if self.estimate is None:
                return self._hold()
            self.home = None
            self._start(t, RETRY_SPEED * k.speed)
        return self.plan.action(t - self.t0, batch, b)

    def _servo(self, t: int, wrist_image: np.ndarray, state: np.ndarray) -> None:
        """Correct the estimate from the wrist view `servo_lag` steps old, posed by today's joint angles."""
        self.wrist_images.append(wrist_image)
        if len(self.wrist_images) > self.knobs.servo_lag + 1:
            self.wrist_images.popleft()
        start, end = (s / self.speed for s in SERVO_WINDOW)
        if not start <= t - self.t0 < end or len(self.wrist_images) <= self.knobs.servo_lag:
            return
        det = detect_red(self.wrist_images[0], self.knobs.red_threshold)
        if det is None:
            return  # the cube is out of view or hidden by the fingers
        camera = self.policy.wrist_camera(state)
        seen = camera.to_plane(det[0], det[1], CUBE_HALF)
        self.estimate = self.estimate + self.knobs.servo_gain * (seen - self.estimate)
        self._start(self.t0, self.speed, retarget=True)

    def _check_grasp(self, t: int, wrist_image: np.ndarray, state: np.ndarray) -> None:
        """After the lift: too little red in the right wrist view means an empty hand; go home, retry."""
        seen = detect_red(wrist_image, self.knobs.red_threshold, min_pixels=WRIST_HELD_PIXELS)
        self.wrist_pixels = 0 if seen is None else seen[2]
        if seen is not None:
            return
        self.retried = True
        arms = np.r_[0:6, 7:13]
        self.home = ([t, t + HOME_STEPS], [state[arms].astype(float), self.state0[arms]])


class CameraPolicy(EpisodeBatch):
    """LeRobot-style policy that sees only images (`knobs.cameras`) and joint angles."""

    def __init__(self, knobs: CameraKnobs, image_height: int = 96, image_width: int = 128):
        self.knobs = knobs
        self.right = Arm("right")
        self.left = Arm("left", model=self.right.model)
        self.image_size = (image_height, image_width)
        self.top_camera = PinholeCamera(
            "top",
            image_height,
            image_width,
            model=self.right.model,
            pos_error=(knobs.calib_dx, knobs.calib_dy, knobs.calib_dz),
            rot_error_deg=(knobs.calib_tilt_deg, 0.0, 0.0),
        )
        super().__init__(self._plan)

    def wrist_camera(self, state: np.ndarray) -> PinholeCamera:
        """The right wrist camera, posed by the right arm's measured joint angles (14-D state)."""
        qpos = np.zeros(self.right.model.nq)
        qpos[self.right.qpos_idx] = state[7:13]
        return PinholeCamera("right_wrist", *self.image_size, model=self.right.model, qpos=qpos,
                             data=self.right.data)  # fmt: skip

    def _plan(self, b: int, batch: dict) -> CameraPlan:
        missing = [c for c in self.knobs.cameras if f"observation.images.{c}" not in batch]
        if missing:
            raise ValueError(f"camera policy needs the views {missing}; render them (WorldConfig.cameras).")
        image = batch["observation.images.top"][b]
        if image.shape[-2:] != self.image_size:
            raise ValueError(
                f"top image is {tuple(image.shape[-2:])}, the policy was built for {self.image_size}; "
                "pass image_height/image_width."
            )
        return CameraPlan(self, batch["observation.state"][b], image)


def make_policy(image_height: int = 96, image_width: int = 128, **kwargs) -> CameraPolicy:
    """Import-path factory: `families.camera:make_policy` with `CameraKnobs` fields as kwargs."""
    return CameraPolicy(CameraKnobs(**kwargs), image_height, image_width)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "blurred": {"blur": 1.0, "red_threshold": 0.5},
    "blurred_strict": {"blur": 1.5, "red_threshold": 0.45},
    "sensor_noise": {"image_noise": 0.35},
    "jittery_detector": {"pixel_noise": 1.5},
    "jittery_detector_retry": {"pixel_noise": 1.5, "retry": True},
    "camera_height_off": {"calib_dz": 0.1},
    "camera_shifted": {"calib_dx": 0.035},
    "camera_shifted_servo": {"calib_dx": 0.035, "servo_lag": 0},
    "camera_shifted_servo_lagged": {"calib_dx": 0.035, "servo_lag": 8},
}
"""Named settings of `camera`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py`, 10 ID + 10 OOD episodes each, seed 0; also in measured.json).
The nominal detector puts the cube within 3.5 mm of its centre on average (8 mm at most, 200 poses).

| setting                     | what goes wrong                                            | ID    | OOD   |
|-----------------------------|------------------------------------------------------------|-------|-------|
| nominal                     | nothing                                                    | 10/10 | 10/10 |
| blurred                     | 1 px blur, colour threshold 0.5                            | 8/10  | 8/10  |
| blurred_strict              | 1.5 px blur, threshold 0.45: the blob shrinks or vanishes  | 1/10  | 4/10  |
| sensor_noise                | pixel noise std 0.35                                       | 5/10  | 5/10  |
| jittery_detector            | centroid noise std 1.5 px (~1.8 cm)                        | 5/10  | 7/10  |
| jittery_detector_retry      | the same, with a wrist-camera grasp check and one retry    | 9/10  | 9/10  |
| camera_height_off           | top camera believed 10 cm higher than it is                | 7/10  | 4/10  |
| camera_shifted              | top camera believed 3.5 cm off along x                     | 0/10  | 0/10  |
| camera_shifted_servo        | the same, corrected by wrist-camera servoing               | 10/10 | 10/10 |
| camera_shifted_servo_lagged | the same, with 8 steps (0.16 s) of wrist-camera latency    | 2/10  | 0/10  |
"""
