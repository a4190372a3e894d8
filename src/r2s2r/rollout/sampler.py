"""The denoising loop: turns the denoiser's velocity field into an imagined frame.

Kept apart from the network (as DIAMOND's `DiffusionSampler` and diffusers' pipelines are): the model
predicts a velocity for one noise level, diffusers' `FlowMatchEulerDiscreteScheduler` chooses the levels
and takes the Euler steps. Few steps are enough for next-frame prediction (the context pins down most of
the frame), which is what makes thousands of imagined episodes affordable.
"""

from __future__ import annotations

import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from r2s2r.model.modeling_world_model import WorldModel


class FrameSampler:
    """Sample the next frame of every view from K context frames and the action chunks."""

    def __init__(self, model: WorldModel, steps: int | None = None):
        self.model = model
        self.steps = steps or model.config.sampling_steps
        self.scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        chunks: torch.Tensor,
        states: torch.Tensor,
        generator: torch.Generator | None = None,
        poses: torch.Tensor | None = None,
        robot: str | None = None,
    ) -> torch.Tensor:
        """Next frame (B,V,3,h,w) in [-1,1].

        Args:
            context: (B,K,V,3,h,w) context frames in [-1,1].
            chunks: (B,K,C) normalized action chunks; the last leads from the last context frame to the
                new one.
            states: (B,K,S) normalized proprio at the context frames.
            generator: makes the initial noise, and so the frame, reproducible.
            poses: (B,2,E) raw object poses at the last context frame and in the new frame, for a model that
                sketches objects (`object_sketch`).
            robot: whose views and actions (a model pretrained on several robots); None: the model's own.
        """
        B = context.shape[0]
        x = torch.randn(context[:, 0].shape, generator=generator, device=context.device, dtype=context.dtype)
        self.scheduler.set_timesteps(self.steps, device=context.device)
        clean = torch.zeros(B, device=context.device, dtype=context.dtype)
        sketch = self.model.sketches(chunks, states, poses, robot)  # the same at every step (None: none)
        for i, t in enumerate(self.scheduler.timesteps):
            sigma = self.scheduler.sigmas[i].to(context.dtype).expand(B)
            velocity = self.model.velocity(x, sigma, context, clean, chunks, states, sketch, robot)
            x = self.scheduler.step(velocity, t, x).prev_sample
        return self.model.frame_from_target(x, context[:, -1])
