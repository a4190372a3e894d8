"""The held-cube classifiers of `benchmarks/head_frames.py`: the red-pixel count and the red layout."""

from __future__ import annotations

import numpy as np

from head_frames import PENALTIES, LayoutClassifier, fit_thresholds, wrist_layout, wrist_red


def _frames(held: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(N,3,3,96,128) grey frames with a 10x10 red square in each wrist view: between the fingers (the
    bottom centre, jittered) where that arm holds the cube, in the top-left quarter where it does not. The
    same number of red pixels either way, so only where they lie tells the two apart."""
    images = np.full((len(held), 3, 3, 96, 128), 0.5)
    for i, row in enumerate(held):
        for a, is_held in enumerate(row):
            r, c = (70, 59) if is_held else (10, 10)
            r, c = r + rng.integers(-4, 5), c + rng.integers(-4, 5)
            images[i, a + 1, :, r : r + 10, c : c + 10] = np.array([1.0, 0.1, 0.1])[:, None, None]
    return images


def test_the_layout_tells_held_from_not_where_the_count_cannot():
    rng = np.random.default_rng(0)
    episodes = np.repeat(np.arange(8), 20)
    labels = rng.random((len(episodes), 2)) < 0.5
    images = _frames(labels, rng)
    assert np.all(wrist_red(images) == 100)  # every wrist view shows exactly the square

    classify = LayoutClassifier(wrist_layout(images), labels, episodes)
    assert all(p in PENALTIES for p in classify.penalties)
    fresh = rng.random((60, 2)) < 0.5
    shown = _frames(fresh, rng)
    assert np.array_equal(classify(wrist_layout(shown)), fresh)
    by_count = wrist_red(shown) >= fit_thresholds(wrist_red(images), labels)
    assert (by_count == fresh).all(1).mean() < 0.5  # the count is the same held or not: a guess per arm


def test_the_layout_is_the_red_share_of_each_block():
    images = np.zeros((1, 3, 3, 96, 128))
    images[0, 1, 0, :8, :4] = 1.0  # half of the left wrist view's first 8x8 block is red
    images[0, 2, 0, 88:, 120:] = 1.0  # all of the right wrist view's last block
    layout = wrist_layout(images)
    assert layout.shape == (1, 2, 12 * 16)
    assert layout[0, 0, 0] == 0.5 and layout[0, 0, 1:].sum() == 0
    assert layout[0, 1, -1] == 1.0 and layout[0, 1, :-1].sum() == 0
