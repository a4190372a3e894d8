"""r2s2r-search: the base and the searched policy on the same reference-world episodes, resumable."""

from __future__ import annotations

import json

import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.eval.search import SearchEvalConfig, evaluate_search, read_rows, summarize
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.rollout.search import SearchConfig
from r2s2r.scripts.search import main as search_cli

TIMING = ("decision_seconds_mean", "batch_seconds")  # wall-clock fields: the only ones that may differ


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return str(model.save_pretrained(tmp_path_factory.mktemp("ckpt") / "tiny"))


def _cfg(checkpoint, out, candidates=(1, 3), **kw):
    settings = dict(candidates=candidates, episodes=3, episode_length=15, num_envs=2, seed=4, output=str(out))
    return SearchEvalConfig(
        base=PolicyConfig(kwargs={"skill": "noisy"}),
        search=SearchConfig(checkpoint=checkpoint, horizon=1, iterations=1, policy_samples=1),
        **{**settings, **kw},
    )


def _without_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_rows_summary_and_determinism(checkpoint, tmp_path):
    summary = evaluate_search(_cfg(checkpoint, tmp_path / "a" / "episodes.jsonl"))
    rows = read_rows(tmp_path / "a" / "episodes.jsonl")
    # 3 episodes in lockstep batches of 2, for N=1 then N=3; ID and OOD alternate as in the recorder
    assert [(r["candidates"], r["episode"]) for r in rows] == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1), (3, 2)]
    assert [r["split"] for r in rows[:3]] == ["id", "ood", "id"]
    assert all(r["decisions"] == 0 and r["chose_base"] == 1.0 for r in rows[:3])  # N=1: never searched
    assert all(r["decisions"] == 3 for r in rows[3:])  # 15 steps, a decision every 5 (the tiny model's frame)
    assert [r["initial_xy"] for r in rows[:3]] == [r["initial_xy"] for r in rows[3:]]  # the same episodes
    by_n = summary["by_candidates"]
    assert by_n["1"]["all"]["trials"] == 3 and by_n["3"]["id"]["trials"] == 2
    assert by_n["3"]["decision_seconds_mean"] > 0 and by_n["1"]["decision_seconds_mean"] == 0
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["by_candidates"] == by_n
    evaluate_search(_cfg(checkpoint, tmp_path / "b" / "episodes.jsonl"))
    assert _without_timing(read_rows(tmp_path / "b" / "episodes.jsonl")) == _without_timing(rows)


def test_summary_counts_episodes_won_and_lost_against_the_base():
    def row(n, episode, success):
        split = "id" if episode % 2 == 0 else "ood"
        searched = n > 1
        timing = {"decision_seconds_mean": 0.5 * searched, "chose_base": 1.0}
        return {"candidates": n, "episode": episode, "split": split, "success": success,
                "decisions": int(searched), **timing}  # fmt: skip

    base = [True, False, False, True]
    searched = {4: [True, True, False, False], 16: [True, True, True, True]}
    rows = [row(1, e, s) for e, s in enumerate(base)]
    rows += [row(n, e, s) for n, outcomes in searched.items() for e, s in enumerate(outcomes)]
    by_n = summarize(rows, (1, 4, 16))
    # N=4 wins episode 1 and loses episode 3: 2 successes like the base, which the rates alone would hide
    assert (by_n["4"]["won"], by_n["4"]["lost"], by_n["4"]["all"]["successes"]) == (1, 1, 2)
    assert (by_n["16"]["won"], by_n["16"]["lost"]) == (2, 0)
    assert (by_n["1"]["won"], by_n["1"]["lost"]) == (0, 0)


def test_resume_adds_only_what_is_missing(checkpoint, tmp_path):
    out = tmp_path / "episodes.jsonl"
    evaluate_search(_cfg(checkpoint, out, candidates=(1,)))
    lines = out.read_text().splitlines()
    assert len(lines) == 4  # header + 3 episodes
    out.write_text("\n".join(lines[:-1]) + '\n{"candidates": 1, "epis')  # killed mid-write of episode 2
    evaluate_search(_cfg(checkpoint, out, candidates=(1, 3)))  # resumes N=1, then adds N=3
    rows = read_rows(out)
    keys = [(r["candidates"], r["episode"]) for r in rows]
    assert sorted(keys) == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1), (3, 2)] and len(set(keys)) == 6
    full = read_rows(_fresh(checkpoint, tmp_path))
    order = sorted(_without_timing(rows), key=lambda r: (r["candidates"], r["episode"]))
    assert order == sorted(_without_timing(full), key=lambda r: (r["candidates"], r["episode"]))


def _fresh(checkpoint, tmp_path):
    out = tmp_path / "fresh" / "episodes.jsonl"
    evaluate_search(_cfg(checkpoint, out))
    return out


def test_other_settings_are_refused_and_the_cli_reports_one_line(checkpoint, tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    evaluate_search(_cfg(checkpoint, out, candidates=(1,)))
    with pytest.raises(ValueError, match="holds results of other settings"):
        evaluate_search(_cfg(checkpoint, out, candidates=(1,), episode_length=20))
    capsys.readouterr()  # (the progress bars so far)
    code = search_cli([f"--output={out}", "--candidates=[0]"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "candidates=(0,) must list numbers >= 1" in err[0]
