"""Where imagination first parts from the real log: the first frame of each open-loop replay at which the
imagined cube stands more than `APART` from the logged one, and what was happening there.

`benchmarks/generalization.py` replays each ranked family's logs with the state head (`head_openloop`:
the logged actions from the first logged frame, no policy in the loop) and reports the object error at
1 / 3 / 6 s and the outcome agreement. That says how far imagination strays, not where. Here every
replayed episode's imagined cube (mean over the ensemble) is laid beside the logged one frame by frame; at the
first frame from which they stand more than `APART` apart for `PERSIST` frames, the parting is put in one
of five kinds:

- `imagined lift`: the imagined cube is up (more than `UP` above where it started), the logged one is not;
- `missed lift`: the logged cube is up, the imagined one is not;
- `dropped in log`: both are up, the logged one is falling (it loses more than `FALL` over the next frame);
- `apart in the air`: both are up otherwise (held offset, handed to another hand, dropped in imagination);
- `on the table`: neither is up (pushed, slid, tipped).

Beside each, the hand (`left` / `right`) whose grasp point is nearest the cube that is up (the logged one
where neither or both are), from the logged joints through the head's own kinematics. Per family it tables
the replayed outcome against the logged one, and for the episodes whose outcomes disagree, the kind of their
first parting, split by direction (imagined success where the log failed, and the reverse).

For the missed right lifts, why: whether `head.balance` and the pads let the grasp take the cube on the
logged state, and if they do, which of `head.takes`' conditions the imagined right gripper failed and how
much wider its imagined opening was than the logged one.

Beside it, the right hand's first close on the resting cube in each log (its opening falling through
`CLOSING`, the cube within 8 cm of its grasp point and not yet moved): where the cube's centre lies then
across gravity against the pads' faces (`GraspKinematics.balance_margin`, on the logged state, a frame
after the close began), whether it lay between the pads (`between_pads`), and whether the cube was lifted
`LIFTED` within the next 2 s. `head.balance` cuts at `head.balance_margin` (3 mm inside, from the coverage
recordings): this table shows where real policies' grasps lift.

All families ranked so far are spent (each was ranked once with the head it was fresh for), so this reads
their logs to choose what to fix next; the fix is then judged on families written after it.

Usage:
    python benchmarks/studies/divergence.py --skip dmp,rrt  # ~10 min, 2 cores: the logs of families 4-22
    python benchmarks/studies/divergence.py --episodes 4 --logs "outputs/bench/generalization_tuned/logs/*/*"
"""

from __future__ import annotations

import argparse
import glob
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.training.head import read_episodes, start_env, trunk_features  # noqa: E402

APART = 0.03  # m: imagined and logged cube centres further apart than this have parted
UP = 0.015  # m above the starting height: the cube is up
PERSIST = 3  # model frames (0.6 s) the two must stay apart: a lift a frame early or late is no parting
FALL = 0.01  # m lost over one model frame: the logged cube is falling
CLOSING = 0.8  # normalized opening: a gripper falling through it has started to close
LIFTED = 0.07  # m above the starting height: the grasp lifted the cube
MARGIN_BINS = (-1.0, -0.006, -0.003, -0.002, -0.001, 0.0, 0.003, 0.006, 0.02, 1.0)  # m, balance margin edges
KINDS = ("imagined lift", "missed lift", "dropped in log", "apart in the air", "on the table")
HANDS = ("left", "right")  # the head's grippers, in order


@torch.no_grad()
def replay(model: WorldModel, ep: dict[str, torch.Tensor]) -> dict:
    """One episode's logged actions replayed by the head: imagined cube positions (T,3) after each chunk
    (frame t+1 of the log), whether imagination ever succeeded, and the logged outcome."""
    head = model.state_head
    latent = head.encode_features(
        trunk_features(model, ep)[:1],
        model.norm("state", ep["observation.state"][:1].float()),
        start_env(model, ep),
    )
    latent = latent[:, None].expand(-1, model.config.head.ensemble, -1)  # (1,M,·) as `step` makes it
    chunks = model.norm_chunks(ep["action"].float())
    poses, takes, success = [], [], False
    for t in range(len(chunks) - 1):  # the last chunk has no logged frame after it
        before = take_parts(model, latent)
        latent = head.step(latent, chunks[t : t + 1])
        takes.append(take_conditions(model, before, latent))
        pred = head.decode(latent, imagined=True)
        success |= bool(pred["success_logit"].sigmoid().mean() > 0.5)
        poses.append(model.unnorm("env", pred["env_state"].mean(1))[0, :3])
    return {
        "takes": takes,
        "imagined": torch.stack(poses),
        "logged": ep["observation.environment_state"][1 : len(chunks), :3].float(),
        "states": ep["observation.state"][1 : len(chunks)].float(),
        "imagined_success": success,
        "real_success": bool(ep["episode_success"]) if "episode_success" in ep else False,
    }


def take_parts(model: WorldModel, latent: torch.Tensor) -> dict:
    """The right gripper's part of `head.takes` at a frame's start (latent (1,M,·)), members' means."""
    head, right = model.state_head, 1
    L, S = model.config.head.latent_dim, model.config.state_dim
    rel = head._grasp(latent)[3]
    raw = latent[..., L : L + S] * head.joint_std + head.joint_mean
    return {
        "between": bool(head.between_pads(rel).mean(1)[0, right] > 0.5),
        "balanced": bool(head.balanced(latent).mean(1)[0, right] > 0.5),
        "start": float(raw.mean(1)[0, head.grippers[right]]),
        "closed_below": float(head.stop_opening(latent).mean(1)[0, right] + head.ON_SLACK),
    }


def take_conditions(model: WorldModel, before: dict, after: torch.Tensor) -> dict:
    """Which of `head.takes`' conditions the right gripper meets over one imagined frame, and its opening at
    the frame's end (`after`, the stepped latent)."""
    head, right = model.state_head, 1
    L, S = model.config.head.latent_dim, model.config.state_dim
    end = float((after[..., L : L + S] * head.joint_std + head.joint_mean).mean(1)[0, head.grippers[right]])
    return {
        "between the pads": before["between"],
        "balanced": before["balanced"],
        "closed": end < before["closed_below"],
        "not opening": end - before["start"] <= head.CARRY_RELEASE,
        "opening": end,
    }


def missed_lift_cause(model: WorldModel, ep: dict[str, torch.Tensor], r: dict) -> dict | None:
    """For a right lift imagination missed: over the two frames before the logged cube went up and that
    frame, whether the balance and pad rules let the grasp take it on the logged state; if they do, the
    fewest take conditions the imagined right gripper failed at any of those frames, and how much wider its
    imagined opening was than the logged one (the largest gap)."""
    head, right = model.state_head, 1
    logged = ep["observation.environment_state"].float()
    up = torch.nonzero(logged[1:, 2] > logged[0, 2] + UP)
    if not len(up):
        return None
    lift = int(up[0])
    frames = range(max(lift - 2, 0), min(lift + 1, len(r["takes"])))
    state = ep["observation.state"].float()
    point, rot = head.fk(state[list(frames)])
    rel = (rot.transpose(-1, -2) @ (logged[list(frames), None, :3] - point)[..., None])[..., 0]
    between = head.between_pads(rel)[:, right] > 0.5
    balanced = head.fk.balance_margin(rel, rot)[:, right] >= model.config.head.balance_margin
    if not bool((between & balanced).any()):
        return {
            "cause": "refused on the logged state: " + ("balance" if between.any() else "outside the pads")
        }
    failed = min(
        (tuple(k for k, ok in r["takes"][t].items() if k != "opening" and not ok) for t in frames), key=len
    )
    gap = max(r["takes"][t]["opening"] - float(state[t + 1, head.grippers[right]]) for t in frames)
    return {"cause": "imagined: " + (", ".join(failed) or "all met") + " failed" * bool(failed),
            "opening_gap": round(gap, 3)}  # fmt: skip


def parting(model: WorldModel, r: dict) -> dict | None:
    """The first frame from which the imagined cube stays more than APART from the logged one, its kind and
    the hand nearest the cube that is up there; None where they never part."""
    gap = (r["imagined"] - r["logged"]).norm(dim=-1)
    far = (gap > APART).float()
    stays = torch.nn.functional.max_pool1d(-far[None], PERSIST, 1)[0] < 0  # far over frames t .. t+PERSIST-1
    apart = torch.nonzero(stays)
    if not len(apart):
        return None
    t = int(apart[0])
    rest = float(r["logged"][0, 2])
    real_up, imag_up = float(r["logged"][t, 2]) > rest + UP, float(r["imagined"][t, 2]) > rest + UP
    if imag_up and not real_up:
        kind, cube = "imagined lift", r["imagined"][t]
    elif real_up and not imag_up:
        kind, cube = "missed lift", r["logged"][t]
    elif real_up:
        after = r["logged"][min(t + 1, len(gap) - 1), 2]
        kind = "dropped in log" if float(r["logged"][t, 2] - after) > FALL else "apart in the air"
        cube = r["logged"][t]
    else:
        kind, cube = "on the table", r["logged"][t]
    point, _ = model.state_head.fk(r["states"][t : t + 1])  # (1,G,3) the grasp points, from the logged joints
    hand = HANDS[int((point[0] - cube).norm(dim=-1).argmin())]
    return {"frame": t, "kind": kind, "hand": hand, "gap_m": round(float(gap[t]), 3)}


@torch.no_grad()
def first_close(model: WorldModel, ep: dict[str, torch.Tensor]) -> dict | None:
    """The right hand's first close on the resting cube in a log (see the module docstring): its balance
    margin (m) and between-pads value a frame after, and whether the cube was lifted within 2 s."""
    head, right = model.state_head, 1
    state = ep["observation.state"].float()
    pose = ep["observation.environment_state"].float()
    point, rot = head.fk(state)
    rel = (rot.transpose(-1, -2) @ (pose[:, None, :3] - point)[..., None])[..., 0]
    opening, rest = state[:, head.grippers[right]], pose[0, 2]
    fps = round(len(state) / 8)  # model frames per second (8 s episodes)
    for t in range(1, len(state) - 1):
        closing = opening[t - 1] > CLOSING >= opening[t]
        if closing and rel[t, right].norm() < 0.08 and pose[t, 2] < rest + 0.005:
            k = t + 1
            return {
                "margin_m": round(float(head.fk.balance_margin(rel[k : k + 1], rot[k : k + 1])[0, right]), 4),
                "between": round(float(head.between_pads(rel[k : k + 1])[0, right]), 3),
                "lifted": bool((pose[k : k + 2 * fps, 2] > rest + LIFTED).any()),
            }
    return None


def margin_rows(episodes: list[dict]) -> list[list]:
    """Right-hand first closes between the pads, by balance margin: how many, and how many lifted the cube."""
    closes = [e["close"] for e in episodes if e["close"] and e["close"]["between"] > 0.5]
    rows = []
    for lo, hi in zip(MARGIN_BINS[:-1], MARGIN_BINS[1:], strict=True):
        got = [c["lifted"] for c in closes if lo <= c["margin_m"] < hi]
        rate = f"{100 * np.mean(got):.0f} %" if got else "-"
        rows.append([f"{1000 * lo:+.0f} .. {1000 * hi:+.0f}", len(got), sum(got), rate])
    outside = [e["close"]["lifted"] for e in episodes if e["close"] and e["close"]["between"] <= 0.5]
    rows.append(["not between the pads", len(outside), sum(outside), f"{100 * np.mean(outside):.0f} %"])
    return rows


def family_rows(model: WorldModel, roots: list[str], episodes: int) -> dict[str, dict]:
    """Per family: each replayed episode's outcome pair and first parting."""
    out: dict[str, dict] = {}
    for root in roots:
        family, policy = Path(root).parts[-2:]
        for ep in read_episodes(root, model, episodes):
            r = replay(model, ep)
            part = parting(model, r)
            missed = part and part["kind"] == "missed lift" and part["hand"] == "right"
            out.setdefault(family, {"episodes": []})["episodes"].append({
                "policy": policy, "real": r["real_success"], "imagined": r["imagined_success"],
                "parting": part, "close": first_close(model, ep),
                "missed_lift": missed_lift_cause(model, ep, r) if missed else None,
            })  # fmt: skip
        print(f"{family}/{policy}: {len(out[family]['episodes'])} episodes", flush=True)
    return out


def summary(episodes: list[dict]) -> dict:
    """Outcome agreement and, per direction of disagreement, the kinds (and hands) of first partings."""
    false_success = [e for e in episodes if e["imagined"] and not e["real"]]
    false_failure = [e for e in episodes if e["real"] and not e["imagined"]]

    def kinds(group: list[dict]) -> dict[str, int]:
        c = Counter(f"{e['parting']['kind']} ({e['parting']['hand']})" if e["parting"] else "never apart"
                    for e in group)  # fmt: skip
        return dict(c.most_common())

    return {
        "episodes": len(episodes),
        "agreement": round(float(np.mean([e["real"] == e["imagined"] for e in episodes])), 3),
        "false_success": len(false_success),
        "false_failure": len(false_failure),
        "false_success_kinds": kinds(false_success),
        "false_failure_kinds": kinds(false_failure),
        "all_kinds": kinds(episodes),
    }


def missed_lift_rows(episodes: list[dict]) -> list[list]:
    """The causes of the missed right lifts (`missed_lift_cause`), commonest first, with the median gap
    between the imagined and the logged opening where the rules pass on the logged state."""
    causes = Counter(e["missed_lift"]["cause"] for e in episodes if e["missed_lift"])
    rows = []
    for cause, n in causes.most_common():
        same = [e["missed_lift"] for e in episodes if e["missed_lift"] and e["missed_lift"]["cause"] == cause]
        gaps = [m["opening_gap"] for m in same if "opening_gap" in m]
        rows.append([cause, n, f"{np.median(gaps):+.2f}" if gaps else "-"])
    return rows


def top(kinds: dict[str, int], n: int = 2) -> str:
    return ", ".join(f"{k} {v}" for k, v in list(kinds.items())[:n]) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="assets/world_model_coverage", help="world model directory")
    parser.add_argument(
        "--logs",
        default="outputs/bench/generalization_*/logs/*/*",
        help="glob of real-log roots, one per policy (comma-separated globs: their union)",
    )
    parser.add_argument("--skip", default="", help="comma-separated families whose logs are left out")
    parser.add_argument("--episodes", type=int, default=10, help="logged episodes per policy (the first N)")
    parser.add_argument(
        "--out",
        default=str(Path(__file__).parents[1] / "results/archive/divergence.json"),
        help="JSON written",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    model = WorldModel.from_pretrained(args.model)
    skip = set(filter(None, args.skip.split(",")))
    found = {r for pattern in args.logs.split(",") for r in glob.glob(pattern)}
    roots = [r for r in sorted(found) if Path(r, "meta").is_dir() and Path(r).parts[-2] not in skip]
    if not roots:
        sys.exit(f"no LeRobot logs match --logs {args.logs!r}; run benchmarks/generalization.py first.")
    families = family_rows(model, roots, args.episodes)
    summaries = {f: summary(v["episodes"]) for f, v in families.items()}
    pooled = summary([e for v in families.values() for e in v["episodes"]])
    print_table(
        f"{args.model}: logged actions replayed open loop; the first parting (> {100 * APART:.0f} cm) of the "
        "episodes whose outcome imagination gets wrong",
        ["family", "episodes", "agreement", "false success: first parting", "false failure: first parting"],
        [[f, s["episodes"], f"{100 * s['agreement']:.0f} %",
          f"{s['false_success']}: {top(s['false_success_kinds'])}",
          f"{s['false_failure']}: {top(s['false_failure_kinds'])}"]
         for f, s in [*summaries.items(), ("pooled", pooled)]],
    )  # fmt: skip
    for direction in ("false_success_kinds", "false_failure_kinds", "all_kinds"):
        print(f"pooled {direction.replace('_', ' ')}: {top(pooled[direction], 12)}")
    everything = [e for v in families.values() for e in v["episodes"]]
    margins = margin_rows(everything)
    print_table(
        "the right hand's first close on the resting cube in the logs, by balance margin (mm inside the"
        f" pads' faces; head.balance cuts at {1000 * model.config.head.balance_margin:+.0f} mm): lifted"
        f" {100 * LIFTED:.0f} cm within 2 s",
        ["margin (mm)", "grasps", "lifted", "rate"],
        margins,
    )
    missed = missed_lift_rows(everything)
    print_table(
        "the right lifts imagination missed (first parting 'missed lift (right)'): why, over the two frames"
        " before the logged cube went up and that frame",
        ["cause", "episodes", "median imagined - logged opening"],
        missed,
    )
    write_json(Path(args.out), {
        "machine": machine_info(), "model": args.model, "logs": args.logs, "skipped": sorted(skip),
        "episodes_per_policy": args.episodes,
        "apart_m": APART, "up_m": UP, "fall_m": FALL, "families": summaries, "pooled": pooled,
        "missed_right_lifts": [dict(zip(["cause", "episodes", "median_opening_gap"], r, strict=True))
                               for r in missed],
        "first_close_by_margin": [dict(zip(["margin_mm", "grasps", "lifted", "rate"], r, strict=True))
                                  for r in margins],
        "per_episode": families,
    })  # fmt: skip


if __name__ == "__main__":
    main()
