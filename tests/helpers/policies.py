"""Small policies for tests, loaded through the import-path interface like any user policy."""

from __future__ import annotations

import numpy as np
import torch


class Reach:
    """Moves the `joints` (default: the right shoulder) towards `target` in `steps` steps from wherever the
    episode starts."""

    def __init__(self, target: float = -0.5, steps: int = 20, joints: tuple[int, ...] = (8,)):
        self.target, self.steps, self.joints, self.t, self.start = target, steps, list(joints), 0, None

    def reset(self) -> None:
        self.t, self.start = 0, None

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        state = batch["observation.state"]
        if self.start is None:
            self.start = state.clone()
        alpha = min(1.0, self.t / self.steps)
        self.t += 1
        action = self.start.clone()
        action[:, self.joints] = (1 - alpha) * self.start[:, self.joints] + alpha * self.target
        return action


class Faulty(Reach):
    """Misbehaves at step `at_step` in every env whose cube starts beyond `x_above`."""

    def __init__(self, mode: str = "raise", at_step: int = 5, x_above: float = -1.0):
        super().__init__()
        self.mode, self.at_step, self.x_above = mode, at_step, x_above
        self.bad = None

    def reset(self) -> None:
        super().reset()
        self.bad = None

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.bad is None:
            self.bad = batch["observation.environment_state"][:, 0] > self.x_above
        action = super().select_action(batch)
        if self.t - 1 != self.at_step or not self.bad.any():
            return action
        if self.mode == "raise":
            raise RuntimeError("the policy's server went away")
        if self.mode == "nan":
            action[self.bad, 3] = float("nan")
            return action
        if self.mode == "shape":
            return action[:, :7]
        if self.mode == "unstable":  # fault injection: the recorder's own world blows up in the bad envs
            from r2s2r.data.recorder import _WORKER

            for i in np.nonzero(self.bad.numpy())[0]:
                _WORKER["world"].physics[i].data.qvel[:] = 1e12  # MuJoCo's mjWARN_BADQVEL on the next step
            return action
        raise ValueError(f"unknown mode {self.mode}")


def make_reach(**kwargs) -> Reach:
    return Reach(**kwargs)


def make_faulty(**kwargs) -> Faulty:
    return Faulty(**kwargs)


def make_not_a_policy() -> object:
    return object()


class Interrupted(Reach):
    """Acts like `Reach` until its `kill_at`-th call in this process, then stops the run as Ctrl-C would."""

    calls = 0  # across instances: a killed run loses its policy object too

    def __init__(self, kill_at: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.kill_at = kill_at

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        Interrupted.calls += 1
        if Interrupted.calls == self.kill_at:
            raise KeyboardInterrupt
        return super().select_action(batch)


def make_interrupted(**kwargs) -> Interrupted:
    return Interrupted(**kwargs)


class Hold:
    """Commands the joints to stay where the observation says they are: reacts to every observation."""

    def reset(self) -> None:
        pass

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["observation.state"].clone()


def make_hold() -> Hold:
    return Hold()
