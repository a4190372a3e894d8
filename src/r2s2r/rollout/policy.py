"""The policy interface every part of r2s2r speaks, and loaders for the two kinds of policies.

A policy is any object with `reset()` and `select_action(batch) -> (B, A) tensor`, exactly LeRobot's
convention: `batch["observation.images.<cam>"]` is (B,3,H,W) float in [0,1], `batch["observation.state"]`
is (B,14) float; `observation.environment_state` (B,7 per object) is present when the world provides it
(the reference world does, hardware usually does not), so scripted demonstrators can use it.

Policies come from (a) a LeRobot pretrained policy directory or (b) an import path `package.module:factory`
called with keyword arguments. The same object runs unchanged in the reference world and, later, in the
world model.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@runtime_checkable
class Policy(Protocol):
    def reset(self) -> None: ...

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...
