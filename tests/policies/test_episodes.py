"""Playing policies in the reference world: episode sets, lockstep batches and the labels of an episode."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.policies.episodes import LAPSE_STEPS, episode_batches, initial_pose, label_episode
from r2s2r.robots.aloha import WorldConfig, in_id_box


def test_episode_labels_computed_by_hand():
    def label(rewards, index, dist):
        rewards = np.array(rewards, np.float32)
        return label_episode(rewards, rewards == 4, index, np.zeros(7), dist)

    # touched, lost for 1 s (LAPSE_STEPS at 0), grasped again, handed over, dropped at the very end
    lost_then_done = [0, 1, 2] + [0] * LAPSE_STEPS + [1, 2, 3, 4, 4, 3]
    labels = label(lost_then_done, 5, "ood")
    assert labels == {
        "episode_index": 5, "distribution": "ood", "initial_object_pose": [0.0] * 7, "success": True,
        "success_at_end": False, "success_step": LAPSE_STEPS + 6, "recovered": True, "max_reward": 4.0,
    }  # fmt: skip
    # contact flicker shorter than a lapse, and waiting before the first touch, are not a recovery
    flicker = [0] * 120 + [1, 2, 0, 2] + [0] * (LAPSE_STEPS - 1) + [2, 3, 4, 4]
    clean = label(flicker, 0, "id")
    assert [clean[k] for k in ("success", "success_at_end", "recovered", "success_step")] == [
        True,
        True,
        False,
        175,
    ]
    near_miss = label([0, 1, 2, 3, 2, 3, 0], 1, "id")
    assert [near_miss[k] for k in ("success", "success_step", "recovered", "max_reward")] == [
        False,
        -1,
        False,
        3.0,
    ]


def test_episode_batches_pad_the_last_batch_and_alternate_id_and_ood():
    world = WorldConfig(cameras=(), num_envs=4)
    batches = episode_batches(world, num_episodes=6, distribution="mixed", seed=3)
    assert [b.indices for b in batches] == [[0, 1, 2, 3], [4, 5]]
    assert batches[1].padded == [4, 5, 5, 5] and batches[1].poses.shape == (4, 7)
    assert batches[0].dists == ["id", "ood", "id", "ood"]
    np.testing.assert_array_equal(batches[1].poses[3], batches[1].poses[1])  # padding repeats the last
    ids = np.array([in_id_box("transfer_cube", p[:2]) for p in batches[0].poses])
    assert ids.tolist() == [True, False, True, False]
    # episode i depends on (seed, i) only, not on the batch it falls in
    alone = episode_batches(WorldConfig(cameras=(), num_envs=1), 6, "mixed", 3, first=5)
    np.testing.assert_array_equal(alone[0].poses[0], initial_pose(world, "mixed", 3, 5)[0])
    np.testing.assert_array_equal(alone[0].poses[0], batches[1].poses[1])
    with pytest.raises(ValueError, match="distribution='ring' must be one of"):
        episode_batches(world, 2, "ring", 0)
