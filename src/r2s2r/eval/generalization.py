"""Ranking on policy families a world model never saw: per family and pooled, beside the noise floor.

A ranking figure says what a user will see only if it was measured on policies that generated none of the
model's training data and informed none of its design. `held_out_violations` checks the first against
the model's `provenance.json` (which policies recorded the data it was fitted on); the second cannot be
checked by code, so a benchmark states it (`kept_out_of` in its JSON).

`family_metrics` takes the ranked policies (as `rank.json` lists them: name, family, real and imagined
success per split) and, optionally, a second real run's rates (the noise floor), and returns for the
pooled set and for each family with at least two policies: the ranking statistics per split (Pearson,
Spearman, Kendall, MMRV, pairwise accuracy, calibration slope and MAE), and the same statistics between
the two real runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from r2s2r.data.provenance import generated_by, read_provenance
from r2s2r.eval.rank import ranking_metrics
from r2s2r.eval.ranking import spearman
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.training.head import trunk_features


def held_out_violations(model_dir: str | Path, manifest: dict[str, dict]) -> list[str]:
    """One line per held-out policy (manifest: name -> {path, family}) whose family recorded data that
    `model_dir` was fitted on; [] when every family is held out. A model without provenance.json is
    reported too: nothing can be said about what it saw."""
    entries = read_provenance(model_dir)
    if not entries:
        return [f"{model_dir} has no provenance.json: which policies made its training data is unknown"]
    lines = []
    for name, spec in manifest.items():
        for entry in generated_by(entries, spec["path"]):
            lines.append(
                f"{name} (family {spec.get('family', '?')}, {spec['path']}) recorded {entry['root']}, "
                f"which {model_dir} used in {entry['stage']}"
            )
    return lines


def family_metrics(
    policies: list[dict], floor: dict[str, dict] | None = None, n_boot: int = 2000, seed: int = 0
) -> dict:
    """{"pooled": ..., "families": {family: ...}}, each {"metrics": per split, "noise_floor": per split or
    None, "policies": names}; families of fewer than two policies have no statistics and are left out."""
    groups: dict[str, list[dict]] = {"pooled": policies}
    for p in policies:
        groups.setdefault(f"family:{p['family']}", []).append(p)
    out: dict = {"families": {}}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        real = {p["name"]: p["real"] for p in members}
        imagined = {p["name"]: p["imagined"] for p in members}
        result = {
            "policies": sorted(real),
            "metrics": ranking_metrics(real, imagined, n_boot, seed),
            "noise_floor": None,
        }
        if floor is not None:
            result["noise_floor"] = ranking_metrics(real, {n: floor[n] for n in real}, n_boot, seed)
        if key == "pooled":
            out["pooled"] = result
        else:
            out["families"][key.removeprefix("family:")] = result
    return out


@torch.no_grad()
def uncertainty_vs_error(model: WorldModel, episodes: list[dict[str, torch.Tensor]], bins: int = 5) -> dict:
    """Does the head know where it is wrong? Each episode's logged actions are replayed by the state head
    from its first frame (its proprio and object pose), and at every imagined frame the spread of the
    ensemble members' object positions, plus that of their own expected positions before the step's mode
    was picked (`outcome_spread`; m, the uncertainty), is set against the error of their mean (m).

    Returns the frames scored, the Spearman correlation of spread and error, and `bins` equal-count bins of
    spread with their mean spread and mean error (a head whose uncertainty rises where the data is thin
    has errors that rise from bin to bin)."""
    head = model.state_head
    spread, error = [], []
    for length, group in _by_length(episodes).items():
        env = torch.stack([ep["observation.environment_state"].float() for ep in group])  # (B,T,E)
        state = torch.stack([model.norm("state", ep["observation.state"][:1].float())[0] for ep in group])
        feats = torch.stack([trunk_features(model, ep)[0] for ep in group])  # (B,F)
        latent = head.encode_features(feats, state, model.norm("env", env[:, 0]))
        chunks = torch.stack([model.norm_chunks(ep["action"].float()) for ep in group])  # (B,T-1,C)
        head.forget_outcomes()  # new episodes
        for t in range(length - 1):
            latent = head.step(latent, chunks[:, t])
            members = model.unnorm("env", head.decode(latent)["env_state"])[..., :3]  # (B,M,3) metres
            outcomes = head.outcome_spread(metres=True)  # where they disagree about the outcome
            spread.append(members.std(1).norm(dim=-1) + (0.0 if outcomes is None else outcomes))
            error.append((members.mean(1) - env[:, t + 1, :3]).norm(dim=-1))
    s, e = torch.cat(spread).numpy(), torch.cat(error).numpy()
    edges = np.quantile(s, np.linspace(0, 1, bins + 1))
    which = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, bins - 1)
    return {
        "frames": int(s.size),
        "spearman": spearman(s, e),
        "bins": [
            {
                "spread_m": float(s[which == b].mean()),
                "error_m": float(e[which == b].mean()),
                "frames": int((which == b).sum()),
            }
            for b in range(bins)
            if (which == b).any()
        ],  # fmt: skip
    }


def _by_length(episodes: list[dict[str, torch.Tensor]]) -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = {}
    for ep in episodes:
        groups.setdefault(len(ep["observation.state"]), []).append(ep)
    return groups
