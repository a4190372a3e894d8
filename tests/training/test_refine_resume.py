"""r2s2r-refine-head resumes after a kill: it keeps its state beside the output every `save_every` steps,
continues from it to the weights an uninterrupted run reaches, refuses other settings, and leaves nothing
behind once finished.

The kill is simulated by raising in the middle of a step (from the loss of step `k`), which stops the run as
a kill does: after its last saved state, with the steps since lost."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import r2s2r.training.head as head_module
from helpers.recordings import blind_model, record_state_only
from r2s2r.errors import SettingsChangedError
from r2s2r.scripts.refine_head import main as refine_main
from r2s2r.training.head import HeadTrainConfig, RefineConfig, partial_dir, refine_checkpoint

LOSS = head_module._window_loss


class KilledError(Exception):
    """The run was stopped in the middle of a step."""


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A tiny world model whose head reads no cameras, and a two-episode state-only recording."""
    root = tmp_path_factory.mktemp("resume")
    data = record_state_only(root / "demo", seed=7)
    model, _ = blind_model(data)
    return str(model.save_pretrained(root / "blind")), data


def refine(start, out, **overrides) -> dict:
    checkpoint, data = start
    head = dict(steps=24, batch_size=8, window=3, save_every=5) | overrides.pop("head", {})
    return refine_checkpoint(
        RefineConfig(checkpoint=checkpoint, data=[data], output_dir=str(out), cameras=False,
                     head=HeadTrainConfig(**head), **overrides)
    )  # fmt: skip


def count_steps(monkeypatch, kill_at: int | None = None) -> list[int]:
    """The steps the refinement takes from now on (one per loss computed); with `kill_at`, the run is
    killed in the middle of that step (counted from this call)."""
    steps = []

    def counted(*args):
        if len(steps) == kill_at:
            raise KilledError
        steps.append(len(steps))
        return LOSS(*args)

    monkeypatch.setattr(head_module, "_window_loss", counted)
    return steps


def test_a_killed_refinement_resumes_to_the_weights_of_an_uninterrupted_one(start, tmp_path, monkeypatch):
    whole = refine(start, tmp_path / "whole")
    killed = tmp_path / "killed"
    with pytest.raises(KilledError):
        count_steps(monkeypatch, kill_at=13)  # states saved after 5 and 10 steps; steps 10-12 are lost
        refine(start, killed)
    partial = partial_dir(killed)
    assert not killed.exists()  # nothing there looks like a refined model
    assert json.loads((partial / "state.json").read_text())["step"] == 10
    steps = count_steps(monkeypatch)
    resumed = refine(start, killed, head=dict(save_every=7))  # save_every may change
    assert len(steps) == 24 - 10  # it continued from step 10, it did not start over
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["final_loss"] == whole["final_loss"]
    assert not partial.exists() and not partial_dir(tmp_path / "whole").exists()


def test_resuming_with_other_settings_is_refused_naming_the_flag(start, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    with pytest.raises(KilledError):
        count_steps(monkeypatch, kill_at=6)
        refine(start, out)
    partial = partial_dir(out)
    changes = {
        "--head.lr": dict(head=dict(lr=2e-3)), "--head.steps": dict(head=dict(steps=30)),
        "--max_episodes": dict(max_episodes=1), "--kinematics": dict(kinematics=False),
    }  # fmt: skip
    messages = {}
    for flag, change in changes.items():
        with pytest.raises(SettingsChangedError) as refused:
            refine(start, out, **change)
        messages[flag] = str(refused.value)
        assert "\n" not in messages[flag] and flag in messages[flag] and f"delete {partial}" in messages[flag]
    assert "--head.lr was 0.001, now 0.002" in messages["--head.lr"]
    checkpoint, data = start
    argv = [f"--checkpoint={checkpoint}", f"--data=[{data}]", f"--output_dir={out}", "--cameras=false",
            "--head.steps=24", "--head.batch_size=8", "--head.window=3", "--head.lr=0.002"]  # fmt: skip
    capsys.readouterr()
    assert refine_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--head.lr was 0.001, now 0.002" in err
    assert json.loads((partial / "state.json").read_text())["step"] == 5  # the refusal kept the state


def test_a_finished_refinement_leaves_only_the_refined_model(start, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    refine(start, runs / "refined", head=dict(steps=6, save_every=2))
    assert sorted(p.name for p in runs.iterdir()) == ["refined"]
    assert sorted(p.name for p in (runs / "refined").iterdir()) == [
        "config.json", "model.safetensors", "provenance.json", "refine.json"
    ]  # fmt: skip
