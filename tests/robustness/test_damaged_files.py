"""Damaged inputs: truncated or corrupt weights, configs, videos and parquet files (training state: see
test_resume_settings.py). Each command ends with one error line that names the file and the fix, exit
status 2, and writes nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers.failures import leftovers, one_error, tiny_checkpoint, truncate, zero_middle
from r2s2r.scripts import eval as eval_cli
from r2s2r.scripts import eval_openloop, rank

CORRUPTIONS = {
    "truncated header": lambda p: truncate(p, 100),
    "truncated tensors": lambda p: truncate(p, 0.5),
    "garbage header": lambda p: p.write_bytes(b"\xff" * 16 + p.read_bytes()[16:]),
    "empty": lambda p: p.write_bytes(b""),
}


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    return tiny_checkpoint(recorded[0].root, tmp_path_factory.mktemp("ckpt") / "tiny")


def _damaged_copy(checkpoint, tmp_path, name: str, damage) -> str:
    copy = tmp_path / "damaged"
    shutil.copytree(checkpoint, copy)
    damage(copy / name)
    return str(copy)


def _eval_flags(root, ckpt, out):
    return [f"--checkpoint={ckpt}", f"--starts=[{root}]", "--max_steps=5", f"--output={out}"]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_damaged_weights_in_eval(recorded, checkpoint, tmp_path, capfd, corruption):
    ckpt = _damaged_copy(checkpoint, tmp_path, "model.safetensors", CORRUPTIONS[corruption])
    out = tmp_path / "eval" / "episodes.jsonl"
    assert eval_cli.main(_eval_flags(recorded[0].root, ckpt, out)) == 2
    error = one_error(capfd, "r2s2r-eval")
    assert error.startswith(f"{ckpt}/model.safetensors is truncated or corrupt (")
    assert error.endswith("the checkpoint is damaged: copy it again, or re-save or retrain it.")
    assert not out.parent.exists()


def test_damaged_weights_in_openloop_and_rank(recorded, checkpoint, tmp_path, capfd):
    ckpt = _damaged_copy(checkpoint, tmp_path, "model.safetensors", CORRUPTIONS["truncated tensors"])
    flags = [f"--checkpoint={ckpt}", f"--data.root={recorded[0].root}", f"--output_dir={tmp_path / 'ol'}"]
    assert eval_openloop.main(flags) == 2
    assert "model.safetensors is truncated or corrupt" in one_error(capfd, "r2s2r-eval-openloop")
    shutil.copytree(recorded[0].root, tmp_path / "logs" / "demo")
    flags = [f"--checkpoint={ckpt}", f"--logs_dir={tmp_path / 'logs'}", f"--output_dir={tmp_path / 'rank'}"]
    assert rank.main(flags) == 2
    assert f"{ckpt}/model.safetensors is truncated or corrupt" in one_error(capfd, "r2s2r-rank")
    assert not (tmp_path / "ol").exists() and not (tmp_path / "rank" / "rank.json").exists()


def test_weights_with_nan_are_named(recorded, checkpoint, tmp_path, capfd):
    from safetensors.torch import load_file, save_file

    def poison(path):
        tensors = load_file(path)
        name = sorted(tensors)[0]
        tensors[name] = tensors[name].clone().fill_(float("nan"))
        save_file(tensors, path)

    ckpt = _damaged_copy(checkpoint, tmp_path, "model.safetensors", poison)
    assert eval_cli.main(_eval_flags(recorded[0].root, ckpt, tmp_path / "e.jsonl")) == 2
    assert f"{ckpt}/model.safetensors holds NaN/inf in " in one_error(capfd, "r2s2r-eval")


@pytest.mark.parametrize("text", ["{\n", "", "[1, 2]", "\x00\xff"])
def test_config_that_is_not_json(recorded, checkpoint, tmp_path, capfd, text):
    ckpt = _damaged_copy(checkpoint, tmp_path, "config.json", lambda p: p.write_text(text))
    assert eval_cli.main(_eval_flags(recorded[0].root, ckpt, tmp_path / "e.jsonl")) == 2
    error = one_error(capfd, "r2s2r-eval")
    assert error.startswith(f"{ckpt}/config.json is not")
    assert "world model" in error or "the checkpoint is damaged" in error


def test_video_with_a_zeroed_middle_is_named(recorded, checkpoint, tmp_path, capfd):
    data = tmp_path / "data"
    shutil.copytree(recorded[0].root, data)
    video = data / "videos" / "observation.images.top" / "chunk-000" / "file-000.mp4"
    zero_middle(video)
    out = tmp_path / "eval" / "episodes.jsonl"
    flags = [f"--checkpoint={checkpoint}", f"--starts=[{data}]", "--max_steps=5", f"--output={out}"]
    assert eval_cli.main(flags) == 2
    error = one_error(capfd, "r2s2r-eval")
    assert error.startswith(f"video file {video} is corrupt or truncated (decoding frames ")
    assert ".cpp" not in error and error.endswith("re-record the dataset or drop the episodes stored in it.")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("part", ["data", "meta/episodes"])
def test_truncated_parquet_is_named(recorded, checkpoint, tmp_path, capfd, part):
    data = tmp_path / "data"
    shutil.copytree(recorded[0].root, data)
    parquet = sorted((data / part).rglob("*.parquet"))[0]
    truncate(parquet, 0.5)
    assert eval_cli.main(_eval_flags(data, checkpoint, tmp_path / "e.jsonl")) == 2
    error = one_error(capfd, "r2s2r-eval")
    assert error.startswith(f"{parquet} is truncated or corrupt (")
    assert error.endswith("restore it from a copy or record the dataset again.")


def test_rank_lists_damaged_logs_as_failed_and_ranks_the_rest(recorded, checkpoint, tmp_path, capfd):
    logs = tmp_path / "logs"
    manifest = {}
    for name, target in (("low", -0.5), ("high", 0.3), ("broken", 0.0)):
        shutil.copytree(recorded[0].root, logs / name)
        manifest[name] = {"path": "helpers.policies:make_reach", "kwargs": {"target": target}}
    truncate(sorted((logs / "broken" / "data").rglob("*.parquet"))[0], 0.5)
    (tmp_path / "zoo.json").write_text(json.dumps(manifest))
    flags = [
        f"--checkpoint={checkpoint}", f"--logs_dir={logs}", f"--policies={tmp_path / 'zoo.json'}",
        f"--output_dir={tmp_path / 'rank'}", "--max_steps=5", "--n_boot=50", "--report=false",
    ]  # fmt: skip
    assert rank.main(flags) == 1  # one checkpoint failed: the exit status says so
    out = capfd.readouterr().out
    payload = json.loads((tmp_path / "rank" / "rank.json").read_text())
    assert sorted(p["name"] for p in payload["policies"]) == ["high", "low"]
    assert payload["metrics"]["all"]["n"] == 2
    [failed] = payload["failed"]
    assert failed["name"] == "broken" and "file-000.parquet is truncated or corrupt" in failed["error"]
    assert f"FAILED broken: {failed['error']}" in out
