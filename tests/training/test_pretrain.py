"""Pretraining on several robots and tasks, footage without actions, and fine-tuning a pretrained model."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import tiny_record_config
from r2s2r.data.mixture import MixtureBatchSampler, split_roots
from r2s2r.data.recorder import record
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rollout.sampler import FrameSampler
from r2s2r.scripts.train import main as train_main
from r2s2r.training.mixture import UnknownRobotError
from r2s2r.training.train import TrainConfig, train

FAST = dict(batch_size=4, log_every=1, num_workers=0, warmup_steps=1)


def _cfg(out, root, steps=4, **overrides) -> TrainConfig:
    cfg = TrainConfig(
        output_dir=str(out), preset="tiny", steps=steps, save_every=steps, **{**FAST, **overrides}
    )
    cfg.data.root = root
    return cfg


@pytest.fixture(scope="module")
def pusht_data(tmp_path_factory):
    """Two short PushT episodes (10 Hz, one 'top' view, 2-D actions) from the scripted pusher."""
    cfg = tiny_record_config(tmp_path_factory.mktemp("pusht") / "pusht",
                             policy_path="r2s2r.robots.pusht:make_pusher", episode_length=40)  # fmt: skip
    cfg.world.task, cfg.world.cameras = "pusht", ("top",)
    record(cfg)
    return cfg.root


@pytest.fixture(scope="module")
def insertion_data(tmp_path_factory):
    cfg = tiny_record_config(tmp_path_factory.mktemp("insertion") / "insertion", seed=3)
    cfg.world.task = "insertion"
    record(cfg)
    return cfg.root


@pytest.fixture(scope="module")
def two_robots(recorded, pusht_data, tmp_path_factory):
    """A tiny model trained on ALOHA transfer-cube and PushT together, and its untrained twin."""
    cfg = _cfg(tmp_path_factory.mktemp("mix") / "run", f"[{recorded[0].root},{pusht_data}]", steps=12)
    torch.manual_seed(cfg.seed)
    out = train(cfg)
    return WorldModel.from_pretrained(out), out


def test_two_embodiments_of_different_action_sizes_train_and_sample_each(two_robots):
    model, out = two_robots
    cfg = model.config
    assert cfg.robots == ["aloha", "pusht"] and cfg.action_dim == 14
    pusht = cfg.embodiment("pusht")
    assert (pusht.action_dim, pusht.state_dim, pusht.cameras) == (2, 2, ("top",))
    assert pusht.frame_stride == 1  # tiny preset: ALOHA's 50 Hz / 5 = 10 model frames/s = PushT's rate
    assert len(cfg.tasks) == 2 and cfg.task == cfg.tasks[0]  # the first dataset is the model's own
    saved = json.loads((out / "config.json").read_text())
    assert [e["robot"] for e in saved["embodiments"]] == ["pusht"]  # the checkpoint says what it knows
    # PushT batches trained PushT's own projection: it moved away from where a fresh model starts
    torch.manual_seed(0)
    fresh = WorldModel(cfg).denoiser.action_emb["pusht"][0].weight
    trained = model.denoiser.action_emb["pusht"][0].weight
    assert not torch.allclose(fresh, trained)
    assert (
        model.robot_stats["pusht"].action_std.shape == (2,)
        and (model.robot_stats["pusht"].action_std > 1).all()
    )
    model.denoiser.patch_out.weight.data.normal_(0, 0.05)  # so that actions reach the pixels in 12 steps
    sampler = FrameSampler(model, steps=2)
    for robot, views, A, stride in (("aloha", 2, 14, 5), ("pusht", 1, 2, 1)):
        K, B = cfg.context_frames, 2
        context = torch.rand(B, K, views, 3, 32, 32) * 2 - 1
        chunks = torch.randn(B, K, stride * A)
        states = torch.randn(B, K, A)
        frames = [sampler.sample(context, c, states, torch.Generator().manual_seed(1), robot=robot)
                  for c in (chunks, chunks + 1.0)]  # fmt: skip
        assert frames[0].shape == (B, views, 3, 32, 32) and torch.isfinite(frames[0]).all()
        assert (frames[0] - frames[1]).abs().max() > 1e-4  # the frame depends on this robot's actions


def test_footage_without_actions_ignores_actions_and_proprio():
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(arm_sketch=False, tasks=("a", "b"), task="a"))
    for name, weight in model.denoiser.named_parameters():  # adaLN-Zero starts every block as the identity
        if "modulation" in name or "patch_out" in name:
            weight.data.normal_(0, 0.05)
    B, K = 2, model.config.context_frames
    args = (
        torch.randn(B, 2, 3, 32, 32),
        torch.full((B,), 0.5),
        torch.randn(B, K, 2, 3, 32, 32),
        torch.zeros(B),
    )
    chunks, states = torch.randn(B, K, 5 * 14 * 2), torch.randn(B, K, 14)
    unknown = torch.zeros(B, dtype=torch.bool)
    with torch.no_grad():
        a = model.denoiser(*args, chunks, states, known=unknown)
        b = model.denoiser(*args, chunks + 3, states - 2, known=unknown)
        c = model.denoiser(*args, chunks + 3, states - 2)
        other_task = model.denoiser(*args, chunks, states, task=torch.ones(B, dtype=torch.long))
        own_task = model.denoiser(*args, chunks, states)
    torch.testing.assert_close(a, b)  # unknown actions and proprio: nothing of them reaches the frame
    assert (a - c).abs().max() > 1e-4  # known ones do
    assert (other_task - own_task).abs().max() > 1e-4  # and so does the task


def test_action_free_dataset_is_zeroed_and_marked(recorded, insertion_data, tmp_path):
    from r2s2r.data.mixture import MixtureDataset, open_sources

    cfg = _cfg(tmp_path / "x", f"[{insertion_data},{recorded[0].root}]")
    cfg.data.action_free = (recorded[0].root,)
    sources = open_sources(cfg.data, 10, ("top", "left_wrist"), "aloha")
    data = MixtureDataset(sources, ["aloha"], [s.task for s in sources])
    first_free = len(sources[0].dataset)
    sample = data[first_free]
    assert not sample["actions_known"] and sample["task_index"] == 1
    assert sample["action"].abs().max() == 0 and sample["observation.state"].abs().max() == 0
    assert data[0]["actions_known"] and data[0]["action"].abs().max() > 0
    assert sources[0].task.startswith("Pick up the peg") and sources[1].task.startswith("Pick up the cube")
    groups = data.groups()  # insertion and transfer-cube clips differ in object-pose size: never one batch
    assert [len(g) for g in groups] == [len(s.dataset) for s in sources]
    with pytest.raises(ValueError, match="--data.action_free names"):
        cfg.data.action_free = (str(tmp_path / "elsewhere"),)
        open_sources(cfg.data, 10, ("top", "left_wrist"), "aloha")


def test_mixture_batches_hold_one_group_and_resume_exactly():
    groups = [torch.arange(0, 30).numpy(), torch.arange(30, 40).numpy()]
    sampler = MixtureBatchSampler(groups, batch_size=4, seed=3)
    batches = [b for b, _ in zip(sampler, range(50), strict=False)]
    assert all(set(b) <= set(groups[0].tolist()) or set(b) <= set(groups[1].tolist()) for b in batches)
    assert all(len(set(b)) == 4 for b in batches)
    share = sum(b[0] < 30 for b in batches) / len(batches)
    assert 0.55 < share < 0.95  # groups drawn in proportion to their clips (30 : 10)
    later = MixtureBatchSampler(groups, batch_size=4, seed=3, start_batch=20)
    assert [b for b, _ in zip(later, range(30), strict=False)] == batches[20:]
    with pytest.raises(ValueError, match="fewer than one batch"):
        MixtureBatchSampler(groups, batch_size=12, seed=0)


def test_split_roots():
    assert split_roots("a/b") == ["a/b"]
    assert split_roots("[a/b, c]") == ["a/b", "c"]
    assert split_roots(["x", "y"]) == ["x", "y"]


def test_finetune_keeps_shared_shapes_and_starts_new_tasks(two_robots, insertion_data, tmp_path):
    pretrained, pre_dir = two_robots
    out = train(_cfg(tmp_path / "ft", insertion_data, steps=2, init_from=str(pre_dir)))
    tuned = WorldModel.from_pretrained(out)
    assert tuned.config.robots == ["aloha", "pusht"] and tuned.config.env_state_dim == 14
    assert tuned.config.tasks[:2] == pretrained.config.tasks and len(tuned.config.tasks) == 3
    assert tuned.config.task == tuned.config.tasks[2]
    before, after = pretrained.state_dict(), tuned.state_dict()
    shared = [k for k in before if k.startswith("denoiser.") and "task_emb" not in k]
    assert shared and all(before[k].shape == after[k].shape for k in shared)
    init = json.loads((out / "init.json").read_text())
    assert "state_head.env_in.weight" in init["fresh"]  # 2 objects now, 1 before: a new input layer
    assert "denoiser.blocks.0.attn.to_q.weight" in init["loaded"] and init["loaded_share"] > 0.5
    torch.testing.assert_close(
        tuned.robot_stats["pusht"].action_std, pretrained.robot_stats["pusht"].action_std
    )
    torch.testing.assert_close(tuned.action_std, pretrained.action_std)  # ALOHA's stats kept, not refitted
    provenance = json.loads((out / "provenance.json").read_text())
    assert [e["stage"] for e in provenance] == ["pretrain (train)"] * 2 + ["train"]


def test_finetune_resumes_exactly_after_a_stop(two_robots, insertion_data, tmp_path):
    _, pre_dir = two_robots
    straight = train(_cfg(tmp_path / "straight", insertion_data, steps=4, init_from=str(pre_dir)))
    train(_cfg(tmp_path / "split", insertion_data, steps=4, init_from=str(pre_dir), stop_after=2))
    resumed = train(_cfg(tmp_path / "split", insertion_data, steps=4, init_from=str(pre_dir), resume=True))
    a = load_file(straight.parent / "training_state" / "model.safetensors")
    b = load_file(resumed.parent / "training_state" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_unknown_robot_is_refused_in_one_line(recorded, pusht_data, tmp_path, capsys):
    aloha_only = train(_cfg(tmp_path / "aloha", recorded[0].root, steps=2))
    with pytest.raises(UnknownRobotError, match="robot 'pusht', which the pretrained model does not know"):
        train(_cfg(tmp_path / "ft", pusht_data, steps=2, init_from=str(aloha_only)))
    flags = ["--preset=tiny", f"--data.root={pusht_data}", f"--output_dir={tmp_path / 'cli'}", "--steps=2",
             f"--init_from={aloha_only}", "--num_workers=0"]  # fmt: skip
    capsys.readouterr()  # the trainings' progress bars
    assert train_main(flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no action or proprio projection can be made" in err[0]
    with pytest.raises(ValueError, match="knows robots \\['aloha'\\], not 'xarm'"):
        WorldModel.from_pretrained(aloha_only).config.embodiment("xarm")


def test_checkpoints_from_before_named_embodiments_load():
    model = WorldModel.from_pretrained("assets/world_model_small")
    raw = load_file("assets/world_model_small/model.safetensors")
    assert "denoiser.view_emb" in raw  # written before robots named their parts
    torch.testing.assert_close(model.denoiser.view_emb["aloha"].data, raw["denoiser.view_emb"].float())
    torch.testing.assert_close(
        model.denoiser.sketch_in["aloha"].weight.data, raw["denoiser.sketch_in.weight"].float()
    )
    assert model.config.robots == ["aloha"] and model.config.tasks == ()


def test_the_first_dataset_is_the_models_own_robot(recorded, pusht_data):
    from r2s2r.data.mixture import open_sources
    from r2s2r.data.reader import ClipConfig
    from r2s2r.training.mixture import mixture_config

    base = WorldModelConfig.tiny()  # a preset: its robot (aloha) is only a default
    cfg = ClipConfig(root=f"[{pusht_data},{recorded[0].root}]", future_frames=3)
    config = mixture_config(base, open_sources(cfg, 10, (), ""))
    assert config.robots == ["pusht", "aloha"] and (config.action_dim, config.env_state_dim) == (2, 3)
    assert config.cameras == ("top",) and config.frame_stride == 1 and not config.arm_sketch
    aloha = config.embodiment("aloha")
    assert (
        aloha.frame_stride == 5 and aloha.arm_sketch and aloha.cameras == ("top", "left_wrist", "right_wrist")
    )
    alone = mixture_config(base, open_sources(ClipConfig(root=pusht_data, future_frames=3), 10, (), ""))
    assert alone.robots == ["pusht"]  # no projections for a robot with no data


def test_action_free_share_sets_the_batches_mix(recorded, tmp_path):
    from r2s2r.data.mixture import MixtureDataset, open_sources
    from r2s2r.data.reader import ClipConfig

    other = tiny_record_config(tmp_path / "footage", seed=11)
    record(other)
    cfg = ClipConfig(root=f"[{recorded[0].root},{other.root}]", action_free=(other.root,), future_frames=3)
    sources = open_sources(cfg, 10, ("top", "left_wrist"), "aloha")
    data = MixtureDataset(sources, ["aloha"], [sources[0].task])
    assert len(data.groups()) == 1 and data.group_weights(0.0) is None  # one robot, one task
    free = set(range(len(sources[0].dataset), len(data)))
    for share in (0.25, 0.75):
        sampler = MixtureBatchSampler(data.groups(), 4, seed=0, weights=data.group_weights(share))
        drawn = [i for b, _ in zip(sampler, range(300), strict=False) for i in b]
        assert abs(sum(i in free for i in drawn) / len(drawn) - share) < 0.05
    with pytest.raises(ValueError, match="action_free_share=1.0 must be in"):
        ClipConfig(action_free_share=1.0)
