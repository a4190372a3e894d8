"""Closed-loop evaluation of a policy inside a tiny world model: deterministic, resumable, clear errors."""

from __future__ import annotations

import json

import av
import pytest
import torch

from helpers.policies import Interrupted
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.eval.imagined import (
    ImaginedEvalConfig,
    PolicyError,
    evaluate_imagined,
    read_results,
    results_digest,
)
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.robots.checker import VIOLATIONS


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())
    for p in model.denoiser.patch_out.parameters():  # an untrained DiT predicts exactly zero: give it a voice
        torch.nn.init.normal_(p, std=0.05)
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return str(model.save_pretrained(tmp_path_factory.mktemp("ckpt") / "tiny"))


def _cfg(recorded, checkpoint, out, policy="helpers.policies:make_reach", kwargs=None, **kw):
    base = dict(samples_per_start=3, batch_size=2, max_steps=10, seed=0)
    base.update(kw)
    return ImaginedEvalConfig(
        checkpoint=checkpoint,
        policy=PolicyConfig(path=policy, kwargs=kwargs or {}),
        starts=(recorded[0].root,),
        output=str(out / "episodes.jsonl"),
        **base,
    )


def test_results_rows_summary_and_determinism(recorded, checkpoint, tmp_path):
    summary = evaluate_imagined(_cfg(recorded, checkpoint, tmp_path / "a"))
    rows = read_results(tmp_path / "a" / "episodes.jsonl")
    # 2 episode starts x 3 samples, batched 2 by 2 in a fixed order: samples outer, episodes inner
    assert [(r["episode"], r["sample"]) for r in rows] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [r["split"] for r in rows[:2]] == ["id", "ood"]  # the recorder's labels
    assert all(r["steps"] == 10 and r["real_success"] is not None for r in rows)
    k = sum(r["success"] for r in rows)
    assert summary["all"]["successes"] == k and summary["all"]["trials"] == 6
    assert summary["id"]["trials"] == 3 and summary["ood"]["trials"] == 3
    lo, hi = summary["all"]["ci"]
    assert 0 <= lo <= k / 6 <= hi <= 1
    for r in rows:  # success step is a control step at which a frame was imagined (every 5th)
        assert (
            (r["success_step"] % 5 == 0 and r["success_step"] > 0)
            if r["success"]
            else r["success_step"] == -1
        )
    for r in rows:  # physics flags: frames flagged per known type, and the first flagged control step
        assert set(r["physics"]) <= set(VIOLATIONS) and all(n > 0 for n in r["physics"].values())
        assert (r["physics_step"] > 0) == bool(r["physics"]) and r["physics_step"] <= 10
    flagged = sum(bool(r["physics"]) for r in rows) / 6
    assert summary["all"]["physics_flagged"] == pytest.approx(flagged)
    # samples of one start differ only in noise, so their confidences differ; a rerun is identical
    assert rows[0]["success_prob_max"] != rows[2]["success_prob_max"]
    evaluate_imagined(_cfg(recorded, checkpoint, tmp_path / "b"))
    assert results_digest(tmp_path / "a" / "episodes.jsonl") == results_digest(
        tmp_path / "b" / "episodes.jsonl"
    )
    evaluate_imagined(_cfg(recorded, checkpoint, tmp_path / "c", seed=1))
    assert results_digest(tmp_path / "a" / "episodes.jsonl") != results_digest(
        tmp_path / "c" / "episodes.jsonl"
    )


def test_killed_run_resumes_without_duplicates(recorded, checkpoint, tmp_path):
    evaluate_imagined(_cfg(recorded, checkpoint, tmp_path / "whole"))
    out = tmp_path / "killed" / "episodes.jsonl"
    Interrupted.calls = 0
    # 10 policy calls per batch: the 15th is in the middle of the second batch
    killed = _cfg(
        recorded, checkpoint, tmp_path / "killed", "helpers.policies:make_interrupted", {"kill_at": 15}
    )
    with pytest.raises(KeyboardInterrupt):
        evaluate_imagined(killed)
    assert len(read_results(out)) == 2  # the first batch only
    with out.open("a") as f:  # and a kill in the middle of writing a line
        f.write('{"start": "x", "episode": 0, "sam')
    resumed = _cfg(
        recorded, checkpoint, tmp_path / "killed", "helpers.policies:make_interrupted", {"kill_at": 15}
    )
    evaluate_imagined(resumed)  # the counter is past 15: no more interruptions
    rows = read_results(out)
    assert len(rows) == 6 and len({(r["episode"], r["sample"]) for r in rows}) == 6
    whole = read_results(tmp_path / "whole" / "episodes.jsonl")
    strip = lambda rs: [{k: v for k, v in r.items()} for r in rs]  # noqa: E731
    assert strip(rows) == strip(whole)  # same rows, same order: the same results file
    evaluate_imagined(resumed)  # a finished run resumed again adds nothing
    assert len(read_results(out)) == 6


def test_resume_with_other_settings_is_refused(recorded, checkpoint, tmp_path):
    evaluate_imagined(_cfg(recorded, checkpoint, tmp_path, samples_per_start=1))
    with pytest.raises(ValueError, match=r"other settings \(differs in \['seed'\]\)"):
        evaluate_imagined(_cfg(recorded, checkpoint, tmp_path, samples_per_start=1, seed=5))


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("raise", r"raised at step 3 of episodes \['0.0', '1.0'\]: RuntimeError"),
        ("nan", r"NaN/inf actions for episode\(s\) \['{bad}.0'\]\.$"),
        ("shape", r"action of shape \(2, 7\), expected \(2, 14\)"),
    ],
)
def test_misbehaving_policy_is_named(recorded, checkpoint, tmp_path, mode, message):
    # only the episode whose cube starts further out in x misbehaves, at control step 3
    data = ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top",)))
    x = [float(data.start(ep)["observation.environment_state"][0]) for ep in (0, 1)]
    kwargs = {"mode": mode, "at_step": 3, "x_above": sum(x) / 2}
    cfg = _cfg(recorded, checkpoint, tmp_path, "helpers.policies:make_faulty", kwargs, samples_per_start=1)
    with pytest.raises(PolicyError, match=message.format(bad=int(x[1] > x[0]))):
        evaluate_imagined(cfg)


def test_state_only_fast_path_and_video(recorded, checkpoint, tmp_path):
    fast = evaluate_imagined(_cfg(recorded, checkpoint, tmp_path / "fast", render=False))
    assert fast["all"]["trials"] == 6
    with pytest.raises(ValueError, match="videos need imagined frames"):
        _cfg(recorded, checkpoint, tmp_path, render=False, videos=(0,))
    evaluate_imagined(
        _cfg(recorded, checkpoint, tmp_path / "v", samples_per_start=1, max_steps=20, videos=(1,))
    )
    video = tmp_path / "v" / "videos" / "episode_000001.mp4"
    with av.open(str(video)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 5  # the start + 4 imagined frames at 10 Hz
    assert json.loads((tmp_path / "v" / "summary.json").read_text())["all"]["trials"] == 2


def test_eval_cli_prints_rates_and_explains_itself(recorded, checkpoint, tmp_path, capsys):
    from r2s2r.scripts.eval import main

    out = tmp_path / "cli" / "episodes.jsonl"
    flags = [
        f"--checkpoint={checkpoint}",
        f"--starts=[{recorded[0].root}]",
        "--max_steps=10",
        f"--output={out}",
    ]
    assert main([*flags, "--policy.path=helpers.policies:make_reach", "--samples_per_start=2"]) == 0
    printed = capsys.readouterr().out
    rows = read_results(out)
    k = sum(r["success"] for r in rows)
    assert f"all  {100 * k / 4:5.1f} % ({k}/4)" in printed and "id " in printed and "ood " in printed
    assert (
        main([*flags, "--policy.path=helpers.policies:make_reach", "--samples_per_start=3"]) == 2
    )  # other settings
    assert "holds results of other settings" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--samples_per_start" in capsys.readouterr().out


def test_the_state_heads_verdict_is_kept_beside_the_judges(recorded, checkpoint, tmp_path):
    """Without frames the head's verdict is the outcome; with frames it is kept beside the judge's. A head
    made to say success from the first frame (its success bias at +30): every fast-path episode succeeds,
    and on the video path the rows keep that verdict while the untrained judge's outcome differs."""
    model = WorldModel.from_pretrained(checkpoint)
    with torch.no_grad():
        model.state_head.success_out.bias.fill_(30.0)
    sure = str(model.save_pretrained(tmp_path / "sure"))
    fast, video = tmp_path / "fast", tmp_path / "video"
    evaluate_imagined(_cfg(recorded, sure, fast, render=False))
    evaluate_imagined(_cfg(recorded, sure, video))
    fast_rows, video_rows = (read_results(d / "episodes.jsonl") for d in (fast, video))
    assert all(r["success"] and r["head_success"] for r in fast_rows)
    assert all(r["head_success"] for r in video_rows) and len(video_rows) == 6
    assert not all(r["success"] for r in video_rows)  # the judge read the frames otherwise
