"""The response-curve benchmark's bookkeeping: curves per axis in the axis's order, and the largest gap per
axis and split against the 15-point target, on numbers worked out by hand."""

from __future__ import annotations

from response_curves import TARGET_POINTS, curves, worst_gaps, zoo


def _rates(all_, id_, ood):
    return {"all": {"rate": all_}, "id": {"rate": id_}, "ood": {"rate": ood}}


def test_zoo_has_one_policy_per_axis_value_with_every_other_knob_nominal():
    policies = zoo(["close_delay"])
    assert list(policies) == [f"close_delay={v}" for v in (-20, 0, 10, 25, 50, 80)]
    assert policies["close_delay=25"]["kwargs"] == {"close_delay": 25}
    assert {p["family"] for p in policies.values()} == {"close_delay"}


def test_largest_gap_per_axis_and_split_by_hand():
    """Axis x at 0 and 1: real all 1.0 / 0.2, imagined 0.9 / 0.6 -> gaps 10 and 40 points, worst 40 at 1.
    ID: real 1.0 / 0.3 vs 0.95 / 0.2 -> 5 and 10, worst 10 at 1 (within the target). OOD: real 1.0 / 0.1
    vs 0.7 / 0.1 -> 30 at 0."""
    policies = {
        "x=0": {"family": "x", "value": 0.0},
        "x=1": {"family": "x", "value": 1.0},
        "y=5": {"family": "y", "value": 5.0},  # not ranked (failed): left out of the curves
    }
    ranked = [
        {"name": "x=1", "real": _rates(0.2, 0.3, 0.1), "imagined": _rates(0.6, 0.2, 0.1)},
        {"name": "x=0", "real": _rates(1.0, 1.0, 1.0), "imagined": _rates(0.9, 0.95, 0.7)},
    ]
    curve_set = curves(ranked, policies)
    assert list(curve_set) == ["x"]
    assert [p["value"] for p in curve_set["x"]] == [0.0, 1.0]  # the policies' order, not the ranking's
    gaps = worst_gaps(curve_set)["x"]
    assert gaps["all"]["points"] == 40.0 and gaps["all"]["at"] == 1.0
    assert gaps["id"]["points"] == 10.0 and gaps["id"]["at"] == 1.0
    assert gaps["ood"]["points"] == 30.0 and gaps["ood"]["at"] == 0.0
    assert TARGET_POINTS == 15
    assert [gaps[s]["within_target"] for s in ("all", "id", "ood")] == [False, True, False]


def test_open_loop_is_measured_on_each_familys_own_logs(tmp_path):
    """`generalization.open_loop_by_family` gives each family `head_openloop` of its own logs only: family
    `b` (one policy, episode 0) matches the head replayed on episode 0 alone, family `a` (two policies,
    episodes 1 and 0) the mean over both."""
    import torch

    from generalization import open_loop_by_family
    from helpers.recordings import DEMONSTRATOR, blind_model
    from r2s2r.data.recorder import RecordConfig, record
    from r2s2r.policies.policy import PolicyConfig
    from r2s2r.robots.aloha import WorldConfig
    from r2s2r.training.head import head_openloop

    root = str(tmp_path / "logs")  # 6.4 s episodes: the 6 s object error (after the lift) is scored
    record(RecordConfig(
        root=root, num_episodes=2, episode_length=320, distribution="mixed", seed=4,
        world=WorldConfig(num_envs=2, cameras=()), policy=PolicyConfig(path=DEMONSTRATOR),
    ))  # fmt: skip
    model, episodes = blind_model(root)
    zoo_ = {"p": {"family": "b"}, "q": {"family": "a"}, "r": {"family": "a"}}
    logged = {"p": [episodes[0]], "q": [episodes[1]], "r": [episodes[0]]}
    with torch.no_grad():
        result = open_loop_by_family(model, zoo_, logged)
        alone = [head_openloop(model, [ep])["object_error_m"]["6s"] for ep in episodes]
    assert list(result) == ["a", "b"]
    assert [result[f]["episodes"] for f in ("a", "b")] == [2, 1]
    assert alone[0] is not None and abs(alone[0] - alone[1]) > 1e-4  # the two episodes differ
    assert result["b"]["object_error_m"]["6s"] == alone[0]
    assert abs(result["a"]["object_error_m"]["6s"] - (alone[0] + alone[1]) / 2) < 1e-9
