"""The world model's config.json across versions: version 1 (flat head fields, some missing in older files)
loads as it was trained; options version 2 removed are refused where a checkpoint turned them on."""

from __future__ import annotations

import json

import pytest

from r2s2r.model.configuration_world_model import (
    CONFIG_VERSION,
    V1_HEAD_FIELDS,
    StateHeadConfig,
    WorldModelConfig,
)


def write_v1(cfg: WorldModelConfig, directory, **extra) -> None:
    """`cfg` as r2s2r 0.1 wrote it: no version, the head's fields flat under their old names."""
    raw = cfg.to_dict()
    head = raw.pop("head")
    raw |= {old: head[new] for old, new in V1_HEAD_FIELDS.items()}
    raw |= {"head_tracks_commands": False, "head_mode_grippers": False, **extra}
    (directory / "config.json").write_text(json.dumps(raw))


def test_version_2_round_trips_and_says_its_version(tmp_path):
    cfg = WorldModelConfig.tiny(head=dict(pose_modes=2, holds=True))
    cfg.save(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["config_version"] == CONFIG_VERSION == 2 and raw["head"]["pose_modes"] == 2
    assert WorldModelConfig.load(tmp_path) == cfg


def test_a_version_1_config_loads_into_the_same_config(tmp_path):
    cfg = WorldModelConfig.tiny(head=dict(still_mode=True, arm_targets=True, latent_dim=24))
    write_v1(cfg, tmp_path)
    loaded = WorldModelConfig.load(tmp_path)
    assert loaded == cfg and loaded.head.latent_dim == 24 and loaded.head.ensemble == 3


def test_a_version_1_config_without_the_later_head_fields_loads_as_it_was_trained(tmp_path):
    """Checkpoints saved before `head_reads_objects` existed have heads that read the cameras only."""
    write_v1(WorldModelConfig.tiny(), tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw["head_reads_objects"], raw["head_carries_state"], raw["head_kinematics"], raw["arm_sketch"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    old = WorldModelConfig.load(tmp_path)
    assert not (old.head.reads_objects or old.head.carries_state or old.head.kinematics or old.arm_sketch)
    today = WorldModelConfig.tiny()
    assert today.head.reads_objects and today.head.carries_state and today.head.kinematics


@pytest.mark.parametrize("option", ["head_tracks_commands", "head_mode_grippers"])
def test_a_removed_option_turned_on_is_refused_with_the_fix(tmp_path, option):
    write_v1(WorldModelConfig.tiny(), tmp_path, **{option: True})
    with pytest.raises(ValueError, match=rf"config.json turns on {option}, an option .* r2s2r-refine-head"):
        WorldModelConfig.load(tmp_path)


def test_unknown_and_newer_configs_are_refused(tmp_path):
    WorldModelConfig.tiny().save(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "head": {**raw["head"], "wings": 2}}))
    with pytest.raises(ValueError, match=r"fields \['head.wings'\] this version of r2s2r does not know"):
        WorldModelConfig.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**raw, "config_version": CONFIG_VERSION + 1}))
    with pytest.raises(ValueError, match="newer than this r2s2r's; upgrade r2s2r"):
        WorldModelConfig.load(tmp_path)


def test_presets_merge_head_fields_one_by_one():
    tiny = WorldModelConfig.tiny(head=dict(holds=True))
    assert (tiny.head.latent_dim, tiny.head.ensemble, tiny.head.holds) == (32, 3, True)
    replaced = WorldModelConfig.tiny(head=StateHeadConfig(holds=True))
    assert (replaced.head.latent_dim, replaced.head.holds) == (128, True)
    with pytest.raises(ValueError, match=r"head.pose_modes=9 must be in 1..8"):
        WorldModelConfig.tiny(head=dict(pose_modes=9))
    assert WorldModelConfig.tiny().differences(tiny) == {"head.holds": (False, True)}
