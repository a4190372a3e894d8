"""PSNR and SSIM match values worked out by hand from their formulas, batch cleanly, and refuse bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from r2s2r.eval.metrics import K1, K2, psnr, ssim


def _images(*shape, seed=0, dtype=torch.float64):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_psnr_of_constant_offset_is_exact():
    target = 0.8 * _images(2, 3, 16, 20)
    # mse = 0.1^2 = 0.01, so PSNR = 10 log10(1 / 0.01) = 20 dB exactly
    assert psnr(target + 0.1, target).tolist() == pytest.approx([20.0, 20.0], abs=1e-9)
    # with data_range 255 and offset 25.5: 10 log10(255^2 / 25.5^2) = 20 dB as well
    assert psnr(255 * target + 25.5, 255 * target, data_range=255.0).tolist() == pytest.approx([20.0] * 2)
    # offset 0.01 in one channel only: mse = 1e-4 / 3
    pred = target.clone()
    pred[:, 1] += 0.01
    assert psnr(pred, target)[0].item() == pytest.approx(10 * math.log10(3 / 1e-4), abs=1e-9)


def test_psnr_of_identical_images_is_inf_or_clamped():
    x = _images(4, 3, 8, 8)
    assert torch.isinf(psnr(x, x)).all() and (psnr(x, x) > 0).all()
    assert psnr(x, x, max_db=100.0).tolist() == [100.0] * 4
    assert psnr(x + 0.1, x, max_db=100.0).tolist() == pytest.approx([20.0] * 4)  # clamps only above


def test_psnr_half_precision_is_computed_in_float32():
    x = _images(3, 8, 8, dtype=torch.float16)
    assert psnr(x, x.flip(-1)).dtype == torch.float32


def test_ssim_of_identical_images_is_one():
    x = _images(2, 3, 32, 32)
    assert ssim(x, x).tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    assert ssim(x.float(), x.float()).tolist() == pytest.approx([1.0, 1.0], abs=1e-6)


def test_ssim_of_constant_images_follows_the_formula():
    a, b = 0.3, 0.7
    pred = torch.full((3, 16, 16), a, dtype=torch.float64)
    target = torch.full((3, 16, 16), b, dtype=torch.float64)
    c1 = (K1 * 1.0) ** 2
    # zero variances and covariance: the structure term is C2 / C2 = 1, only luminance remains
    expected = (2 * a * b + c1) / (a * a + b * b + c1)
    assert ssim(pred, target).item() == pytest.approx(expected, rel=1e-9)
    # with data_range 255 the constants scale with it, so the value is unchanged
    assert ssim(255 * pred, 255 * target, data_range=255.0).item() == pytest.approx(expected, rel=1e-9)
    assert K2 == 0.03


def test_ssim_is_symmetric():
    x, y = _images(2, 3, 24, 24, seed=1), _images(2, 3, 24, 24, seed=2)
    torch.testing.assert_close(ssim(x, y), ssim(y, x), rtol=0, atol=1e-12)


def test_ssim_decreases_as_noise_grows():
    x = _images(3, 32, 32, seed=3)
    noise = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    values = [ssim((x + s * noise).clamp(0, 1), x).item() for s in (0.01, 0.1, 0.5)]
    assert 1 > values[0] > values[1] > values[2] > -1


def test_batching_over_leading_dims_matches_a_loop():
    pred, target = _images(2, 3, 3, 32, 40, seed=5), _images(2, 3, 3, 32, 40, seed=6)  # (B,T,C,H,W)
    for metric in (psnr, ssim):
        batched = metric(pred, target)
        assert batched.shape == (2, 3)
        looped = torch.stack(
            [metric(p, t) for p, t in zip(pred.flatten(0, 1), target.flatten(0, 1), strict=True)]
        )
        torch.testing.assert_close(batched.flatten(), looped, rtol=0, atol=1e-12)


def test_ssim_on_small_images_and_too_small_ones():
    x, y = _images(3, 96, 128, seed=7), _images(3, 96, 128, seed=8)
    assert 0 < ssim(0.5 * x + 0.5 * y, x).item() < 1
    small = _images(3, 8, 10)
    with pytest.raises(ValueError, match=r"8x10 are smaller than the 11x11 window.*at most 7"):
        ssim(small, small)
    assert ssim(small, small, window=7).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive odd"):
        ssim(x, y, window=4)


def test_bad_inputs_are_refused():
    x = _images(3, 16, 16)
    with pytest.raises(ValueError, match=r"pred \(3, 16, 16\) and target \(3, 16, 17\) differ in shape"):
        psnr(x, _images(3, 16, 17))
    with pytest.raises(ValueError, match="differ in shape"):
        ssim(x, x[None].expand(2, -1, -1, -1))
    with pytest.raises(ValueError, match="fewer than 3 dims"):
        psnr(x[0], x[0])
    with pytest.raises(ValueError, match=r"x.float\(\) / 255"):
        ssim((x * 255).byte(), (x * 255).byte())
    with pytest.raises(ValueError, match="data_range"):
        psnr(x, x, data_range=0)


def _skimage_ssim(x: np.ndarray, y: np.ndarray, data_range: float) -> float:
    """scikit-image's structural_similarity (gaussian_weights=True, use_sample_covariance=False), re-typed.

    Filters the whole (C,H,W) image with scipy's Gaussian (sigma 1.5, truncate 3.5 -> 11 taps), then
    averages the SSIM map per channel over the region the padding does not reach (5 pixels each side).
    """
    from scipy.ndimage import gaussian_filter

    def f(a):
        return gaussian_filter(a, sigma=1.5, truncate=3.5)

    values = []
    for a, b in zip(x, y, strict=True):
        ux, uy = f(a), f(b)
        vx, vy, vxy = f(a * a) - ux * ux, f(b * b) - uy * uy, f(a * b) - ux * uy
        c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
        s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
        values.append(s[5:-5, 5:-5].mean())
    return float(np.mean(values))


def test_ssim_matches_scikit_image_algorithm():
    pytest.importorskip("scipy.ndimage")
    x = _images(3, 32, 40, seed=9)
    noise = torch.randn(3, 32, 40, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    y = (x + 0.2 * noise).clamp(0, 1)
    expected = _skimage_ssim(x.numpy(), y.numpy(), 1.0)
    assert ssim(x, y).item() == pytest.approx(expected, rel=1e-10)
    assert ssim(x.float(), y.float()).item() == pytest.approx(expected, rel=1e-5)
    try:
        from skimage.metrics import structural_similarity
    except ImportError:
        return
    reference = structural_similarity(
        x.numpy(),
        y.numpy(),
        data_range=1.0,
        channel_axis=0,
        gaussian_weights=True,
        use_sample_covariance=False,
    )
    assert ssim(x, y).item() == pytest.approx(reference, rel=1e-10)
