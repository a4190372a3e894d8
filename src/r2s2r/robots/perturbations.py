"""Coverage data: scripted episodes that span the ways a policy can succeed and fail at transfer-cube.

A world model learns what actions do only from episodes where they did it: a grasp 5 cm off that closes
on air, a hand that opens halfway over, a push that tips the cube. The demonstrators' presets fail in a
few ways; `make_coverage_demonstrator` draws each episode's skill knobs (`DemonstratorConfig`) from wide
ranges instead, one perturbation at a time or several together, and labels the episode with what it drew
(the recorder stores it beside the episode as `perturbation`), so data and failures can be traced.

A share `clean` of episodes gets no perturbation, a share `single` exactly one kind (the response to each
kind alone), and in the rest each kind is switched on with probability `rate` (kinds combined).
Magnitudes are drawn as `sign * u**2 * limit` (u uniform in [0, 1]) where small errors should be common
and large ones present, uniformly otherwise.

| kind        | knobs (DemonstratorConfig)                        | range                        |
|-------------|---------------------------------------------------|------------------------------|
| grasp       | grasp_offset_x/y/z                                | +-grasp (8 cm) each          |
| orientation | grasp_yaw_error, grasp_pitch_error                | +-0.6 rad, +-0.4 rad         |
| approach    | grasp_yaw/pitch/roll_error                        | +-0.9, -0.9..+0.5, +-0.8 rad |
| timing      | close_timing, close_timing_noise                  | -0.3..+0.6 s, 0..0.2 s       |
| partial     | close_level                                       | 0.2..0.7                     |
| drop        | drop_at                                           | 0..1 of the carry            |
| handover    | handover_offset_x/y/z                             | +-handover (6 cm) each       |
| speed       | speed, speed_jitter                               | 0.5..2 (log-uniform), 0..0.2 |
| noise       | joint_noise, joint_noise_tau                      | 0.004..0.04 rad, 0.1..1 s    |
| pauses      | hesitation_prob, hesitation_max                   | 0.2..0.8, 0.3..1.5 s         |
| regrasp     | max_retries, grasp_noise                          | 1..3, 0..2 cm                |
| push        | push_distance, push_angle, push_height            | 3..12 cm, any, 0..4 cm       |
| explore     | explore_time, explore_radius                      | 0.5..2 s, 2..8 cm            |

`approach` (not drawn unless `kinds` names it, so the default draws stay those of the recorded datasets)
spans grasp directions far from the demonstrator's 60-degree pitch: from nearly level (3 degrees) to nearly
straight down (89 degrees), headings 50 degrees off the cube's faces, and the fingers' closing axis rolled
up to 45 degrees off the horizontal, so a grasp from the side, from above or tilted has been seen closing on
the cube, beside it and on its edges.

Episodes without `regrasp` never re-try (`max_retries=0`): a failure stays a failure unless the kind asks
for recoveries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from r2s2r.robots.demonstrators import DemonstratorConfig, ScriptedDemonstrator

KINDS = (
    "grasp", "orientation", "timing", "partial", "drop", "handover", "speed", "noise", "pauses", "regrasp",
    "push", "explore",
)  # fmt: skip


EXTRA_KINDS = ("approach",)  # drawn only where `kinds` names them
ALL_KINDS = KINDS + EXTRA_KINDS


@dataclass
class PerturbationRanges:
    """How often each kind of perturbation is drawn, and how large it gets."""

    clean: float = 0.15  # share of episodes with no perturbation at all
    single: float = 0.35  # share of episodes with exactly one kind, drawn uniformly
    rate: float = 0.2  # chance each kind is switched on in the remaining episodes
    grasp: float = 0.08  # largest grasp-point error per axis (m)
    handover: float = 0.06  # largest error of the left hand's aim per axis (m)
    kinds: tuple[str, ...] = KINDS  # the kinds that may be drawn

    def __post_init__(self) -> None:
        self.kinds = tuple(self.kinds)
        unknown = sorted(set(self.kinds) - set(ALL_KINDS))
        if unknown:
            raise ValueError(f"unknown perturbation kind(s) {unknown}; known: {', '.join(ALL_KINDS)}.")
        if not (
            0 <= self.rate <= 1 and self.clean >= 0 and self.single >= 0 and self.clean + self.single <= 1
        ):
            raise ValueError(
                f"clean={self.clean}, single={self.single} and rate={self.rate} must be probabilities, "
                "clean + single <= 1."
            )
        if not (0 < self.grasp <= 0.1 and 0 < self.handover <= 0.1):
            raise ValueError(f"grasp={self.grasp} and handover={self.handover} must be in (0, 0.1] m.")


def _signed(rng: np.random.Generator, limit: float) -> float:
    """An error in [-limit, limit], small ones common: sign * u^2 * limit."""
    return float(rng.choice((-1.0, 1.0)) * rng.random() ** 2 * limit)


def _knobs(kind: str, rng: np.random.Generator, r: PerturbationRanges) -> dict:
    """The DemonstratorConfig fields one perturbation kind sets."""
    u = rng.uniform
    if kind == "grasp":
        return {f"grasp_offset_{a}": _signed(rng, r.grasp) for a in "xyz"}
    if kind == "orientation":
        return {"grasp_yaw_error": u(-0.6, 0.6), "grasp_pitch_error": u(-0.4, 0.4)}
    if kind == "timing":
        return {"close_timing": u(-0.3, 0.6), "close_timing_noise": u(0.0, 0.2)}
    if kind == "approach":
        return {
            "grasp_yaw_error": u(-0.9, 0.9),
            "grasp_pitch_error": u(-0.9, 0.5),
            "grasp_roll_error": u(-0.8, 0.8),
        }
    if kind == "partial":
        return {"close_level": u(0.2, 0.7)}
    if kind == "drop":
        return {"drop_at": u(0.0, 1.0)}
    if kind == "handover":
        return {f"handover_offset_{a}": _signed(rng, r.handover) for a in "xyz"}
    if kind == "speed":
        return {"speed": math.exp(u(math.log(0.5), math.log(2.0))), "speed_jitter": u(0.0, 0.2)}
    if kind == "noise":
        return {"joint_noise": math.exp(u(math.log(0.004), math.log(0.04))), "joint_noise_tau": u(0.1, 1.0)}
    if kind == "pauses":
        return {"hesitation_prob": u(0.2, 0.8), "hesitation_max": u(0.3, 1.5)}
    if kind == "regrasp":
        return {"max_retries": int(rng.integers(1, 4)), "grasp_noise": u(0.0, 0.02)}
    if kind == "push":
        return {
            "push_distance": u(0.03, 0.12),
            "push_angle": u(-math.pi, math.pi),
            "push_height": u(0.0, 0.04),
        }
    if kind == "explore":
        return {"explore_time": u(0.5, 2.0), "explore_radius": u(0.02, 0.08)}
    raise ValueError(f"unknown perturbation kind '{kind}'; known: {', '.join(ALL_KINDS)}.")


def draw_perturbation(rng: np.random.Generator, ranges: PerturbationRanges) -> dict:
    """One episode's perturbation: {"kinds": [...], **knobs} (knobs as DemonstratorConfig fields)."""
    draw = rng.random()
    if draw < ranges.clean:
        return {"kinds": [], "max_retries": 0}
    if draw < ranges.clean + ranges.single:
        kinds = [ranges.kinds[int(rng.integers(len(ranges.kinds)))]]
    else:
        kinds = [k for k in ranges.kinds if rng.random() < ranges.rate]
    knobs: dict = {"max_retries": 0}
    for kind in kinds:
        knobs |= _knobs(kind, rng, ranges)
    return {"kinds": kinds, **{k: round(v, 5) if isinstance(v, float) else v for k, v in knobs.items()}}


class CoverageDemonstrator(ScriptedDemonstrator):
    """The scripted demonstrator with every episode's knobs drawn by `draw_perturbation`, and labelled."""

    def __init__(self, ranges: PerturbationRanges, seed: int = 0):
        super().__init__(DemonstratorConfig(), seed=seed)
        self.ranges = ranges
        self.drawn: list[dict] = []  # the running batch's perturbations, in env order
        self.name = "coverage:transfer_cube"

    def reset(self) -> None:
        super().reset()
        self.drawn = []

    def episode_config(self, rng: np.random.Generator) -> DemonstratorConfig:
        drawn = draw_perturbation(rng, self.ranges)
        self.drawn.append(drawn)
        return DemonstratorConfig(**{k: v for k, v in drawn.items() if k != "kinds"})

    def episode_labels(self) -> list[dict]:
        """Per env of the running batch: the perturbation its episode drew (kinds and knobs)."""
        return list(self.drawn)


def make_coverage_demonstrator(seed: int = 0, **ranges) -> CoverageDemonstrator:
    """A coverage demonstrator (import-path factory): `--policy.path=r2s2r.robots.perturbations:
    make_coverage_demonstrator --policy.kwargs='{rate: 0.3}'`; keyword arguments are PerturbationRanges
    fields."""
    known = {f.name for f in fields(PerturbationRanges)}
    unknown = sorted(set(ranges) - known)
    if unknown:
        raise ValueError(f"unknown coverage range(s) {unknown}; known: {', '.join(sorted(known))}.")
    return CoverageDemonstrator(PerturbationRanges(**ranges), seed=seed)
