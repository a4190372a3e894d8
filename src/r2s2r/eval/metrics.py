"""Per-image PSNR and SSIM for comparing imagined frames with real ones, batched over any leading dims.

Open-loop evaluation compares a world model's rollout with the recorded video frame by frame, so both
metrics take (..., C, H, W) float images and return one value per image (shape `...`), on whatever device
the images are on. SSIM follows Wang et al. 2004 exactly as scikit-image computes it with
`gaussian_weights=True, use_sample_covariance=False` (sigma 1.5, 11-tap window, K1=0.01, K2=0.03, statistics
over the valid region only, per channel, then averaged), so the numbers are comparable with published ones.
Half-precision inputs are computed in float32; float64 inputs stay float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

K1 = 0.01
K2 = 0.03


def _check_images(pred: torch.Tensor, target: torch.Tensor, data_range: float, name: str) -> torch.dtype:
    """Raise ValueError unless `pred` and `target` are same-shape float images; return the compute dtype."""
    if pred.shape != target.shape:
        raise ValueError(
            f"{name}: pred {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape; "
            "pass images of the same (..., C, H, W) shape."
        )
    if pred.ndim < 3:
        raise ValueError(f"{name}: images {tuple(pred.shape)} have fewer than 3 dims; pass (..., C, H, W).")
    if not (pred.is_floating_point() and target.is_floating_point()):
        raise ValueError(
            f"{name}: got {pred.dtype} and {target.dtype} images; pass floats in [0, data_range], "
            "e.g. x.float() / 255 for uint8."
        )
    if data_range <= 0:
        raise ValueError(f"{name}: data_range={data_range} must be positive (1.0 for images in [0, 1]).")
    dtype = torch.promote_types(pred.dtype, target.dtype)
    return torch.promote_types(dtype, torch.float32)


def psnr(
    pred: torch.Tensor, target: torch.Tensor, data_range: float = 1.0, max_db: float | None = None
) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB of each image, over its last three dims (C, H, W).

    Args:
        pred: (..., C, H, W) float images in [0, data_range].
        target: images of the same shape.
        data_range: the largest possible pixel value (1.0 for images in [0, 1]).
        max_db: if given, clamp the result to at most this value. Identical images have zero error and
            therefore a PSNR of +inf; pass e.g. `max_db=100.0` to keep averages over frames finite.

    Returns:
        (...) PSNR of each image, in dB.
    """
    dtype = _check_images(pred, target, data_range, "psnr")
    diff = pred.to(dtype) - target.to(dtype)
    mse = diff.square().mean(dim=(-3, -2, -1))  # (...)
    out = 10.0 * torch.log10(data_range**2 / mse)  # mse == 0 gives +inf
    return out if max_db is None else out.clamp(max=max_db)


def _gaussian_taps(window: int, sigma: float, dtype=torch.float32, device=None) -> torch.Tensor:
    """(window,) normalized 1-D Gaussian taps, the separable factor of SSIM's 2-D window."""
    x = torch.arange(window, dtype=torch.float64) - (window - 1) / 2
    taps = torch.exp(-0.5 * (x / sigma) ** 2)
    return (taps / taps.sum()).to(dtype=dtype, device=device)


def _filter(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Valid (unpadded) separable Gaussian filtering of (N, 1, H, W) maps."""
    k = taps.numel()
    x = F.conv2d(x, taps.view(1, 1, k, 1))  # (N,1,H-k+1,W)
    return F.conv2d(x, taps.view(1, 1, 1, k))  # (N,1,H-k+1,W-k+1)


def ssim(
    pred: torch.Tensor,
    target: torch.Tensor,
    data_range: float = 1.0,
    window: int = 11,
    sigma: float = 1.5,
) -> torch.Tensor:
    """Structural similarity (Wang et al. 2004) of each image, averaged over its channels.

    Local statistics use a `window` x `window` Gaussian of std `sigma` over the valid region only (no
    padding), with population (not sample) covariances, as scikit-image's `structural_similarity` with
    `gaussian_weights=True, use_sample_covariance=False` does.

    Args:
        pred: (..., C, H, W) float images in [0, data_range], with H and W at least `window`.
        target: images of the same shape.
        data_range: the largest possible pixel value (1.0 for images in [0, 1]).
        window: odd side of the Gaussian window; 11 goes with sigma 1.5 (use e.g. 7 for tiny images).
        sigma: standard deviation of the Gaussian window, in pixels.

    Returns:
        (...) SSIM of each image; 1 for identical images.
    """
    dtype = _check_images(pred, target, data_range, "ssim")
    if window < 1 or window % 2 == 0:
        raise ValueError(f"ssim: window={window} must be a positive odd number, e.g. 11 or 7.")
    *lead, C, H, W = pred.shape
    if window > H or window > W:
        raise ValueError(
            f"ssim: images of {H}x{W} are smaller than the {window}x{window} window; "
            f"pass a smaller odd window (at most {min(H, W) - (min(H, W) + 1) % 2})."
        )
    x = pred.to(dtype).reshape(-1, 1, H, W)  # (N*C,1,H,W)
    y = target.to(dtype).reshape(-1, 1, H, W)  # (N*C,1,H,W)
    taps = _gaussian_taps(window, sigma, dtype=dtype, device=pred.device)
    stats = _filter(torch.cat([x, y, x * x, y * y, x * y]), taps)  # (5*N*C,1,h,w)
    mu_x, mu_y, xx, yy, xy = stats.chunk(5)  # each (N*C,1,h,w)
    var_x = xx - mu_x * mu_x
    var_y = yy - mu_y * mu_y
    cov = xy - mu_x * mu_y
    c1 = (K1 * data_range) ** 2
    c2 = (K2 * data_range) ** 2
    luminance = (2 * mu_x * mu_y + c1) / (mu_x * mu_x + mu_y * mu_y + c1)
    structure = (2 * cov + c2) / (var_x + var_y + c2)
    per_channel = (luminance * structure).mean(dim=(-3, -2, -1))  # (N*C,)
    return per_channel.reshape(*lead, C).mean(dim=-1)  # (...)
