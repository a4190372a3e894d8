"""Multi-view, action-conditioned diffusion transformer: the network that imagines the next frame.

Every (frame, view) image is cut into patches. Each patch of the noisy target frame also reads the same patch
of the K context frames (channel-stacked, `stack_context`); the target's patches in all V views attend to
each other in one sequence, so views must agree with each other and with the past (with `context_tokens` the
context frames' patches are tokens of that sequence too, 2.3x longer). Each frame's tokens are modulated
(adaLN-Zero, as in DiT) by that frame's own conditioning: its noise level, the action chunk that led into
it and, for context frames, the proprio measured there. So actions condition every frame, not the clip as a
whole. adaLN shifts every patch of a frame alike, so (with `joint_tokens`) each frame also carries one token
per joint of its action chunk and one per proprio value, in the same sequence: a patch that shows the left
gripper can attend to the left gripper's joints. With `relative_actions` a joint's action token also reads
how far each target lies from where the joint is, so an idle arm reads zeros.

The network's output is turned into a denoised target by the world model's EDM-style preconditioning and
from there into the flow-matching velocity `noise - x0` (rectified flow, the parameterisation of diffusers'
`FlowMatchEulerDiscreteScheduler`); `rollout/sampler.py` integrates it. No denoising loop lives here.
"""

from __future__ import annotations

import torch
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import TimestepEmbedding, Timesteps, get_2d_sincos_pos_embed
from einops import rearrange
from torch import nn

from r2s2r.model.configuration_world_model import EmbodimentConfig, WorldModelConfig


def mlp(dim_in: int, dim_hidden: int, dim_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim_in, dim_hidden), nn.SiLU(), nn.Linear(dim_hidden, dim_out))


class Block(nn.Module):
    """A DiT block whose adaLN modulation varies per frame: (B, F, 6D) broadcast over each frame's tokens."""

    def __init__(self, width: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(query_dim=width, heads=heads, dim_head=width // heads, bias=True, out_bias=True)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(width, int(width * mlp_ratio)),
            nn.GELU(approximate="tanh"),
            nn.Linear(int(width * mlp_ratio), width),
        )
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        nn.init.zeros_(self.modulation[1].weight)  # adaLN-Zero: every block starts as the identity
        nn.init.zeros_(self.modulation[1].bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, tokens_per_frame: int) -> torch.Tensor:
        mod = self.modulation(cond).repeat_interleave(tokens_per_frame, dim=1)  # (B,F,6D) -> (B,N,6D)
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.chunk(6, dim=-1)
        x = x + gate1 * self.attn(self.norm1(x) * (1 + scale1) + shift1)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class MultiViewDenoiser(nn.Module):
    """Velocity of the next frame of every view, given K context frames of every view and the actions."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.cfg = cfg
        D, p = cfg.width, cfg.patch_size
        self.grid = (cfg.image_height // p, cfg.image_width // p)
        self.patch_in = nn.Linear(cfg.patch_dim, D)
        if cfg.stack_context:  # the target's tokens also see the context frames' patches at their place
            self.context_in = nn.Linear(cfg.context_frames * cfg.patch_dim, D)
        pos = get_2d_sincos_pos_embed(D, self.grid, base_size=self.grid[0], output_type="pt")  # (P,D)
        self.register_buffer("pos_emb", pos.float().reshape(1, 1, 1, -1, D), persistent=False)
        self.frame_emb = nn.Parameter(torch.zeros(1, cfg.context_frames + 1, 1, 1, D))
        nn.init.normal_(self.frame_emb, std=0.02)
        # Conditioning: noise level (sinusoidal, as diffusers' DiT), the task, and actions and proprio through
        # projections named by the robot, so one model holds several embodiments (`cfg.robots`).
        self.noise_proj = Timesteps(D, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.noise_emb = TimestepEmbedding(D, D)
        if cfg.tasks:
            self.task_emb = nn.Embedding(len(cfg.tasks), D)
            nn.init.normal_(self.task_emb.weight, std=0.02)
        self.no_action = nn.Parameter(torch.zeros(1, 1, D))  # what led into the first context frame
        self.view_emb, self.action_emb, self.state_emb = nn.ParameterDict(), nn.ModuleDict(), nn.ModuleDict()
        self.sketch_in = nn.ModuleDict()
        if cfg.joint_tokens:  # one token per joint: its `frame_stride` action values / its proprio value
            self.action_token, self.state_token = nn.ModuleDict(), nn.ModuleDict()
            self.action_joint, self.state_joint = nn.ParameterDict(), nn.ParameterDict()
            self.no_action_tokens, self.unknown_state = (
                nn.ParameterDict(),
                nn.ParameterDict(),
            )  # into frame 0,
            # the target's proprio (and, for footage without actions, every frame's)
        for robot in cfg.robots:
            self._add_embodiment(cfg.embodiment(robot), cfg.sketched_objects if robot == cfg.robot else 0)
        self.blocks = nn.ModuleList([Block(D, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth)])
        self.final_norm = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))
        self.patch_out = nn.Linear(D, cfg.patch_dim)
        for layer in (self.final_modulation[1], self.patch_out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def _add_embodiment(self, e: EmbodimentConfig, objects: int) -> None:
        """The parts that belong to one robot: its views' embeddings, action and proprio projections, joint
        tokens and, for a robot with arm chains, the sketch projection."""
        cfg, D, p, r = self.cfg, self.cfg.width, self.cfg.patch_size, e.robot
        self.view_emb[r] = nn.Parameter(torch.randn(1, 1, len(e.cameras), 1, D) * 0.02)
        self.action_emb[r] = mlp(e.frame_stride * e.action_dim * cfg.action_features, D, D)
        self.state_emb[r] = mlp(e.state_dim, D, D)
        if e.arm_sketch:  # arms' stick figures (objects' boxes) now and next, at the target's patches
            from r2s2r.robots.arm_sketch import sketch_channels

            self.sketch_in[r] = nn.Linear(2 * sketch_channels(r, objects) * p * p, D)
        if cfg.joint_tokens:
            self.action_token[r] = nn.Linear(e.frame_stride * cfg.action_features, D)
            self.state_token[r] = nn.Linear(1, D)
            self.action_joint[r] = nn.Parameter(torch.randn(1, 1, e.action_dim, D) * 0.02)
            self.state_joint[r] = nn.Parameter(torch.randn(1, 1, e.state_dim, D) * 0.02)
            self.no_action_tokens[r] = nn.Parameter(torch.zeros(1, 1, e.action_dim, D))
            self.unknown_state[r] = nn.Parameter(torch.zeros(1, 1, e.state_dim, D))

    def target_reads(
        self, target: torch.Tensor, context_patches: torch.Tensor, sketch: torch.Tensor | None, robot: str,
        known: torch.Tensor | None,
    ) -> torch.Tensor:  # fmt: skip
        """The target's patch tokens (B,V,P,D) plus what they read at their own place: the context frames'
        pixels (`stack_context`) and the arms' sketches (robots with a sketch; none for unknown actions)."""
        if self.cfg.stack_context:
            target = target + self.context_in(rearrange(context_patches, "b k v p d -> b v p (k d)"))
        if robot in self.sketch_in:
            if sketch is None:
                raise ValueError("this denoiser was built with arm_sketch: pass the arms' sketches.")
            sketched = self.sketch_in[robot](rearrange(self.patchify(sketch), "b f v p d -> b v p (f d)"))
            target = target + (sketched if known is None else sketched * known[:, None, None, None])
        return target

    def patchify(self, frames: torch.Tensor) -> torch.Tensor:
        p = self.cfg.patch_size
        return rearrange(frames, "b f v c (h p1) (w p2) -> b f v (h w) (p1 p2 c)", p1=p, p2=p)  # (B,F,V,P,pd)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        p, (h, w) = self.cfg.patch_size, self.grid
        return rearrange(
            tokens, "b v (h w) (p1 p2 c) -> b v c (h p1) (w p2)", h=h, w=w, p1=p, p2=p
        )  # (B,V,3,H,W)

    def conditioning(
        self,
        sigma: torch.Tensor,
        context_sigma: torch.Tensor,
        chunks: torch.Tensor,
        states: torch.Tensor,
        robot: str,
        task: torch.Tensor | None,
        known: torch.Tensor | None,
    ) -> torch.Tensor:
        """Per-frame conditioning (B, K+1, D): context frames 0..K-1, then the target frame."""
        B, K = states.shape[:2]
        levels = torch.cat([context_sigma[:, None].expand(B, K), sigma[:, None]], dim=1)  # (B,K+1)
        noise = self.noise_emb(self.noise_proj(levels.reshape(-1) * 1000).to(states.dtype)).reshape(
            B, K + 1, -1
        )
        actions = self.action_emb[robot](chunks)  # (B,K,D): chunk k leads from frame k to k+1
        proprio = self.state_emb[robot](states)  # (B,K,D), measured at the context frames only
        if known is not None:  # footage without actions: no chunk led anywhere, no proprio was measured
            actions = torch.where(known[:, None, None], actions, self.no_action)
            proprio = proprio * known[:, None, None]
        led_into = torch.cat([self.no_action.expand(B, 1, -1), actions], dim=1)  # (B,K+1,D)
        proprio = torch.cat([proprio, torch.zeros_like(proprio[:, :1])], dim=1)  # (B,K+1,D)
        cond = noise + led_into + proprio
        if self.cfg.tasks:
            if task is None:  # the model's own task
                task = torch.full((B,), self.cfg.task_index, dtype=torch.long, device=cond.device)
            cond = cond + self.task_emb(task)[:, None]
        return cond

    def joint_tokens(
        self, chunks: torch.Tensor, states: torch.Tensor, robot: str, known: torch.Tensor | None
    ) -> torch.Tensor:
        """Per-frame joint tokens (B, K+1, A+S, D): the chunk that led into the frame, then its proprio."""
        (B, K), A = states.shape[:2], self.action_joint[robot].shape[2]  # the robot's action size
        per_joint = chunks.reshape(B, K, -1, A).transpose(2, 3)  # (B,K,A,stride*features)
        no_action, unknown = self.no_action_tokens[robot], self.unknown_state[robot]
        actions = self.action_token[robot](per_joint)  # (B,K,A,D)
        proprio = self.state_token[robot](states[..., None])  # (B,K,S,D)
        if known is not None:  # footage without actions: every chunk and proprio is unknown
            actions = torch.where(known[:, None, None, None], actions, no_action)
            proprio = torch.where(known[:, None, None, None], proprio, unknown)
        actions = torch.cat([no_action.expand(B, 1, -1, -1), actions], dim=1) + self.action_joint[robot]
        proprio = torch.cat([proprio, unknown.expand(B, 1, -1, -1)], dim=1) + self.state_joint[robot]
        return torch.cat([actions, proprio], dim=2)  # (B,K+1,A+S,D)

    def forward(
        self,
        noisy: torch.Tensor,
        sigma: torch.Tensor,
        context: torch.Tensor,
        context_sigma: torch.Tensor,
        chunks: torch.Tensor,
        states: torch.Tensor,
        sketch: torch.Tensor | None = None,
        robot: str | None = None,
        task: torch.Tensor | None = None,
        known: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The raw network output F for the target frame (see `WorldModel.precondition`).

        Args:
            noisy: (B,V,3,H,W) the target frame at noise level `sigma`, pixels in [-1,1].
            sigma: (B,) noise level in [0,1] (0 clean, 1 pure noise).
            context: (B,K,V,3,H,W) context frames, pixels in [-1,1], possibly noised to `context_sigma`.
            context_sigma: (B,) noise level of the context frames.
            chunks: (B,K,features*stride*A) normalized action chunks, chunk k from frame k to k+1 (the last
                into the target), with `relative_actions` then offsets from the proprio (`denoiser_chunks`).
            states: (B,K,S) normalized proprio at the context frames.
            sketch: (B,2,V,channels,H,W) with `arm_sketch`: the arms' stick figures at the last context frame
                and at the last chunk's final targets (and objects' boxes) (`WorldModel.sketches`).
            robot, task, known: whose views, actions and proprio (None: the model's own, `cfg.robot`); (B,)
                rows of the task embedding (None: the model's own task); (B,) bool, False for footage
                without actions, whose chunks and proprio are then ignored (None: all known).
        """
        cfg, robot = self.cfg, robot or self.cfg.robot
        context_patches = self.patchify(context)  # (B,K,V,P,pd)
        patches = self.patchify(noisy[:, None])  # (B,1,V,P,pd): the target's; the context arrives stacked
        if cfg.context_tokens:
            patches = torch.cat([context_patches, patches], dim=1)  # (B,K+1,V,P,pd)
        cond = self.conditioning(sigma, context_sigma, chunks, states, robot, task, known)  # (B,K+1,D)
        x = (
            self.patch_in(patches)
            + self.pos_emb
            + self.view_emb[robot]
            + self.frame_emb[:, -patches.shape[1] :]
        )
        B, F, V, P, D = x.shape  # (B,F,V,P,D): F = K+1 frames, or the target alone
        target = self.target_reads(x[:, -1], context_patches, sketch, robot, known)
        x = torch.cat([x[:, :-1], target[:, None]], dim=1)
        x = x.reshape(B, F, V * P, D)
        if cfg.joint_tokens:
            joints = self.joint_tokens(chunks, states, robot, known) + self.frame_emb[:, :, 0]
            if not cfg.context_tokens:  # one group: each frame's joints carry that frame's conditioning
                joints = (joints + cond[:, :, None]).reshape(B, 1, -1, D)
            x = torch.cat([x, joints], dim=2)
        if not cfg.context_tokens:
            cond = cond[:, -1:]  # adaLN of the one group: the target frame's
        per_frame = x.shape[2]
        x = x.reshape(B, F * per_frame, D)  # one sequence: every view (of every frame) attends to every other
        for block in self.blocks:
            x = block(x, cond, per_frame)
        target = x[:, -per_frame:][:, : V * P]  # (B,V*P,D) the target frame's image tokens
        shift, scale = self.final_modulation(cond[:, -1:]).chunk(2, dim=-1)
        out = self.patch_out(self.final_norm(target) * (1 + scale) + shift)  # (B,V*P,pd)
        return self.unpatchify(out.reshape(B, V, P, -1))
