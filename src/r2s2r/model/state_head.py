"""The state-dynamics head (fast path) and the success/reward judge (reads frames).

State-dynamics head: encodes one real observation (all views at model resolution + proprio) into a compact
latent, then rolls that latent forward one model frame per action chunk with an ensemble of small MLPs,
never decoding pixels. From any latent it predicts the proprio, the object state (where the data has it),
the staged reward and success. Thousands of candidate action chunks roll out in one batched call; the
spread of the ensemble members is the uncertainty of each imagined step (members agree where they were
trained and drift apart elsewhere).

Judge: a small CNN over all views of one (real or imagined) frame that predicts the staged reward and
success of the state it shows, so an imagined video can be scored like a real one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from r2s2r.model.configuration_world_model import WorldModelConfig


def conv_trunk(width: int) -> nn.Sequential:
    """(N,3,H,W) -> (N, 4*width) features: three stride-2 convs and a global average."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1), nn.SiLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.SiLU(),
        nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1), nn.SiLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )  # fmt: skip


class EnsembleMLP(nn.Module):
    """M independent two-layer MLPs evaluated in one einsum: (B,M,I) -> (B,M,O)."""

    def __init__(self, members: int, dim_in: int, dim_hidden: int, dim_out: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(members, dim_in, dim_hidden))
        self.b1 = nn.Parameter(torch.zeros(members, dim_hidden))
        self.w2 = nn.Parameter(torch.empty(members, dim_hidden, dim_out))
        self.b2 = nn.Parameter(torch.zeros(members, dim_out))
        for w in (self.w1, self.w2):  # each member drawn independently: their disagreement is the signal
            nn.init.uniform_(w, -1 / math.sqrt(w.shape[1]), 1 / math.sqrt(w.shape[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(torch.einsum("bmi,mih->bmh", x, self.w1) + self.b1)
        return torch.einsum("bmh,mho->bmo", h, self.w2) + self.b2


class StateDynamicsHead(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.cfg = cfg
        L, H = cfg.latent_dim, cfg.head_hidden
        self.trunk = conv_trunk(cfg.judge_width)  # shared by all views
        self.state_in = nn.ModuleDict({cfg.robot: nn.Linear(cfg.state_dim, H)})
        self.encoder = nn.Sequential(
            nn.Linear(cfg.num_views * 4 * cfg.judge_width + H, H), nn.SiLU(), nn.Linear(H, L)
        )
        self.latent_norm = nn.LayerNorm(L)  # keeps long latent rollouts bounded (no drift to infinity)
        self.chunk_in = nn.ModuleDict({cfg.robot: nn.Linear(cfg.chunk_dim, H)})
        self.dynamics = EnsembleMLP(cfg.ensemble, L + H, H, L)
        self.state_out = nn.ModuleDict({cfg.robot: nn.Linear(L, cfg.state_dim)})
        self.env_out = nn.Linear(L, max(cfg.env_state_dim, 1))
        self.reward_out = nn.Linear(L, cfg.reward_levels)
        self.success_out = nn.Linear(L, 1)

    def encode(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Latent (B,L) of one observation: images (B,V,3,H,W) in [-1,1], normalized state (B,S)."""
        B, V = images.shape[:2]
        return self.encode_features(self.trunk(images.flatten(0, 1)).reshape(B, -1), state)

    def encode_features(self, features: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Latent (B,L) from the camera trunk's features (B, V*4w) and normalized state (B,S)."""
        state_features = F.silu(self.state_in[self.cfg.robot](state))
        return self.latent_norm(self.encoder(torch.cat([features, state_features], dim=-1)))

    def step(self, latent: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """One model frame ahead for every member: latent (B,L) or (B,M,L), chunk (B,C) -> (B,M,L)."""
        if latent.dim() == 2:
            latent = latent[:, None].expand(-1, self.cfg.ensemble, -1)  # (B,M,L)
        action = F.silu(self.chunk_in[self.cfg.robot](chunk))[:, None].expand(
            -1, latent.shape[1], -1
        )  # (B,M,H)
        return self.latent_norm(latent + self.dynamics(torch.cat([latent, action], dim=-1)))

    def decode(self, latent: torch.Tensor) -> dict[str, torch.Tensor]:
        """From latents (...,L): normalized state and object state, reward logits, success logit."""
        return {
            "state": self.state_out[self.cfg.robot](latent),
            "env_state": self.env_out(latent),
            "reward_logits": self.reward_out(latent),
            "success_logit": self.success_out(latent).squeeze(-1),
        }

    @staticmethod
    def disagreement(decoded: dict[str, torch.Tensor]) -> torch.Tensor:
        """Uncertainty (B,) of member predictions (B,M,·): mean std of normalized state and object state."""
        spread = torch.cat([decoded["state"], decoded["env_state"]], dim=-1).std(dim=1)  # (B,S+E)
        return spread.mean(dim=-1)


class Judge(nn.Module):
    """Staged reward and success of the state one frame shows, from all its views."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.trunk = conv_trunk(cfg.judge_width)
        width = cfg.num_views * 4 * cfg.judge_width
        self.head = nn.Sequential(nn.Linear(width, 128), nn.SiLU(), nn.Linear(128, cfg.reward_levels + 1))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """images (B,V,3,H,W) in [-1,1] -> reward logits (B,levels), success logit (B,)."""
        B = images.shape[0]
        out = self.head(self.trunk(images.flatten(0, 1)).reshape(B, -1))
        return out[:, :-1], out[:, -1]
