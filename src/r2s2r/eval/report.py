"""One self-contained HTML page that shows whether a world model ranks policies the way hardware does.

`r2s2r-rank` writes rank.json: per policy the real and imagined success rates (all, ID, OOD) with their
intervals, per-episode outcomes and the side-by-side videos it saved; and the ranking metrics (correlations,
MMRV, pairwise accuracy, calibration), next to the same metrics between two real runs (the noise floor)
when there are two. This module turns that file into one HTML page that needs nothing else: CSS inline,
plots as base64 PNGs drawn on matplotlib's Agg canvas, videos as base64 data URIs, so the page can be mailed
or attached to an issue and still open with every plot and video. All text from rank.json is HTML-escaped.

Sections: a summary line; the ranking table (sorted by real success); the metrics table per split beside
the noise floor; a real-vs-imagined scatter; success against initial position per policy; the videos.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import av
import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from r2s2r.files import atomic_write_text

SPLITS = {"all": "all", "id": "ID", "ood": "OOD"}  # key in rank.json -> heading
MARKERS = {"all": "s", "id": "o", "ood": "^"}  # scatter marker per split
VIDEO_MIME = {".mp4": "video/mp4", ".m4v": "video/mp4", ".webm": "video/webm"}
BROWSER_CODECS = {"h264", "vp8", "vp9", "av1"}  # what Chrome, Firefox and Safari all decode
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; }
body { margin: 2em auto; max-width: 1200px; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.summary { font-size: 1.1em; background: #f4f6f8; padding: .6em 1em; border-left: 4px solid #4a7; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; } td.name, th.name { text-align: left; }
.muted { color: #888; font-size: .9em; }
figure { display: inline-block; margin: .5em 1em .5em 0; vertical-align: top; }
figcaption { color: #555; } img { max-width: 100%; } video { min-width: 360px; max-width: 100%; }
.wide { overflow-x: auto; }
"""


@dataclass
class ReportConfig:
    """Which ranking results to turn into a report, and where to write it."""

    rank_json: str = "outputs/rank/rank.json"  # ranking results written by r2s2r-rank
    output: str | None = None  # HTML file to write; None = report.html beside rank_json


def _e(value) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(value), quote=True)


def _mpl(text: str) -> str:
    """`text` safe to draw with matplotlib, which would read "$...$" as mathtext."""
    return str(text).replace("$", r"\$")


def _rate(entry: dict | None) -> str:
    """'90.0 % [79.0–96.0] 45/50' of a rate entry {successes, trials, rate, ci}."""
    if not entry or entry.get("rate") is None:
        return "–"
    text = f"{100 * entry['rate']:.1f} %"
    if entry.get("ci"):
        text += f' <span class="muted">[{100 * entry["ci"][0]:.1f}–{100 * entry["ci"][1]:.1f}]</span>'
    if entry.get("trials") is not None:
        text += f' <span class="muted">{_e(entry.get("successes"))}/{_e(entry["trials"])}</span>'
    return text


def _stat(stat: dict | float | None, digits: int = 2) -> str:
    """'0.93 [0.70, 0.99]' of a {value, ci} statistic or a bare number; '–' where undefined."""
    value = stat.get("value") if isinstance(stat, dict) else stat
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    if isinstance(stat, dict) and stat.get("ci") and None not in stat["ci"]:
        text += f' <span class="muted">[{stat["ci"][0]:.{digits}f}, {stat["ci"][1]:.{digits}f}]</span>'
    return text


def _pairs(stat: dict | None) -> str:
    """'89 % (28 pairs)' of a pairwise-accuracy entry."""
    if not stat or stat.get("value") is None:
        return "–" if not stat else f'– <span class="muted">({_e(stat.get("pairs", 0))} pairs)</span>'
    return f'{100 * stat["value"]:.0f} % <span class="muted">({_e(stat.get("pairs"))} pairs)</span>'


def _real_rate(policy: dict) -> float:
    rate = policy["real"]["all"].get("rate")
    return -1.0 if rate is None else rate


def load_rank_json(path: str | os.PathLike) -> dict:
    """Read rank.json and check the keys the report needs, naming the policy and key that is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"rank_json={str(path)!r} does not exist; run r2s2r-rank first, or pass its path."
        )
    results = json.loads(path.read_text())
    if not results.get("policies"):
        raise ValueError(f"{path} lists no policies; rank at least one policy with r2s2r-rank.")
    for i, policy in enumerate(results["policies"]):
        for key in ("name", "real", "imagined"):
            if key not in policy:
                raise ValueError(f"{path}: policy #{i} has no {key!r}; re-write it with r2s2r-rank.")
        for side in ("real", "imagined"):
            if "all" not in policy[side]:
                raise ValueError(f"{path}: policy {policy['name']!r} has no {side}['all'] success rate.")
    return results


def _splits(policies: list[dict]) -> list[str]:
    """The splits any policy has real rates for, in all/ID/OOD order."""
    present = {split for p in policies for split in p["real"]}
    return [s for s in SPLITS if s in present] + sorted(present - set(SPLITS))


def _summary(results: dict, policies: list[dict]) -> str:
    """The one-line verdict at the top: how many policies, and the headline ranking numbers."""
    episodes = sum(len(p.get("episodes", [])) for p in policies)
    text = f"{len(policies)} policies, {episodes} real episodes."
    for label, metrics in (
        ("World model vs hardware", results.get("metrics")),
        ("Noise floor (real vs real)", results.get("noise_floor")),
    ):
        m = (metrics or {}).get("all")
        if m:
            text += (
                f" {label}: Spearman ρ {_stat(m.get('spearman'))}, pairwise accuracy "
                f"{_pairs(m.get('pairwise_accuracy', {}).get('all'))}, MMRV {_stat(m.get('mmrv'), 3)}."
            )
    return text


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def _ranking_table(policies: list[dict], splits: list[str]) -> str:
    """Rank, name, family, imagined rank, real and imagined rates per split, then the share of imagined
    episodes the physics checker flagged; rows in real-rate order."""
    by_imagined = sorted(policies, key=lambda p: -(p["imagined"]["all"].get("rate") or 0.0))
    imagined_rank = {id(p): i + 1 for i, p in enumerate(by_imagined)}
    head1 = "".join(f'<th colspan="2">{_e(SPLITS.get(s, s))}</th>' for s in splits)
    head2 = "<th>real</th><th>imagined</th>" * len(splits)
    rows = []
    for rank, p in enumerate(policies, 1):
        cells = "".join(
            f"<td>{_rate(p['real'].get(s))}</td><td>{_rate(p['imagined'].get(s))}</td>" for s in splits
        )
        rows.append(
            f'<tr><td>{rank}</td><td class="name policy">{_e(p["name"])}</td>'
            f'<td class="name">{_e(p.get("family", ""))}</td><td>{imagined_rank[id(p)]}</td>{cells}'
            f"<td>{_share(p['imagined'].get('all', {}).get('physics_flagged'))}</td></tr>"
        )
    return (
        '<table id="ranking"><thead><tr><th rowspan="2">rank</th><th rowspan="2" class="name">policy</th>'
        f'<th rowspan="2" class="name">family</th><th rowspan="2">imagined rank</th>{head1}'
        '<th rowspan="2">imagined, physics flagged</th></tr>'
        f"<tr>{head2}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _metric_rows(m: dict | None, gaps: list[str]) -> list[str]:
    """The cells of one metrics column, in the order of `_metrics_table`'s row labels."""
    m = m or {}
    calibration = m.get("calibration") or {}
    accuracy = m.get("pairwise_accuracy") or {}
    return [
        _e(m.get("n", "–")),
        _stat(m.get("pearson")),
        _stat(m.get("spearman")),
        _stat(m.get("kendall")),
        _stat(m.get("mmrv"), 3),
        *(_pairs(accuracy.get(gap)) for gap in gaps),
        _stat(calibration.get("slope")),
        _stat(calibration.get("intercept")),
        _stat(calibration.get("mae_points"), 1),
    ]


def _metrics_table(metrics: dict, noise_floor: dict | None) -> str:
    """Metrics as rows; per split a column for the world model and one for the noise floor when present."""
    splits = [s for s in SPLITS if s in metrics] + sorted(set(metrics) - set(SPLITS))
    if not splits:
        return '<p class="muted">rank.json has no ranking metrics.</p>'
    noise_floor = noise_floor or {}
    gaps = sorted(
        {g for m in [*metrics.values(), *noise_floor.values()] for g in m.get("pairwise_accuracy", {})}
    )
    gaps = (["all"] if "all" in gaps else []) + [g for g in gaps if g != "all"]
    labels = ["policies", "Pearson r", "Spearman ρ", "Kendall τ", "MMRV (lower is better)"]
    labels += [
        f"pairwise accuracy, {'all pairs' if g == 'all' else g.replace('gap_', 'gap ≥ ') + ' pts'}"
        for g in gaps
    ]
    labels += ["calibration slope", "calibration intercept", "calibration MAE (pts)"]
    columns, head1, head2 = [], [], []
    for s in splits:
        columns.append(_metric_rows(metrics[s], gaps))
        head2.append("<th>world model</th>")
        if s in noise_floor:
            columns.append(_metric_rows(noise_floor[s], gaps))
            head2.append("<th>noise floor</th>")
        head1.append(f'<th colspan="{1 + (s in noise_floor)}">{_e(SPLITS.get(s, s))}</th>')
    rows = "".join(
        f'<tr><td class="name">{_e(label)}</td>{"".join(f"<td>{col[i]}</td>" for col in columns)}</tr>'
        for i, label in enumerate(labels)
    )
    return (
        f'<table id="metrics"><thead><tr><th rowspan="2" class="name">metric</th>{"".join(head1)}</tr>'
        f"<tr>{''.join(head2)}</tr></thead><tbody>{rows}</tbody></table>"
    )


def _png(fig: Figure) -> str:
    """An <img> holding `fig` as an inline base64 PNG."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _scatter(policies: list[dict], splits: list[str]) -> str:
    """Real vs imagined success, one colour per policy, one marker per split, interval error bars, y = x."""
    fig = Figure(figsize=(6.5, 6))
    ax = fig.add_subplot()
    ax.plot([0, 100], [0, 100], color="#999", linestyle="--", linewidth=1, label="imagined = real")
    colours = matplotlib.colormaps["tab10" if len(policies) <= 10 else "tab20"]
    for k, p in enumerate(policies):
        for s in splits:
            real, imagined = p["real"].get(s) or {}, p["imagined"].get(s) or {}
            if real.get("rate") is None or imagined.get("rate") is None:
                continue
            x, y = 100 * real["rate"], 100 * imagined["rate"]
            xerr = np.abs(np.array(real.get("ci") or [real["rate"]] * 2) * 100 - x).reshape(2, 1)
            yerr = np.abs(np.array(imagined.get("ci") or [imagined["rate"]] * 2) * 100 - y).reshape(2, 1)
            ax.errorbar(
                x,
                y,
                xerr=xerr,
                yerr=yerr,
                fmt=MARKERS.get(s, "D"),
                color=colours(k % colours.N),
                markersize=8 if s == "all" else 6,
                alpha=1.0 if s == "all" else 0.6,
                capsize=2,
            )
            if s == "all":
                ax.annotate(_mpl(p["name"]), (x, y), textcoords="offset points", xytext=(6, 6), fontsize=9)
    handles = [
        Line2D([], [], color="#555", marker=MARKERS.get(s, "D"), linestyle="", label=SPLITS.get(s, s))
        for s in splits
    ]
    ax.legend(handles=[*handles, *ax.get_lines()[:1]], loc="upper left")
    ax.set(
        xlim=(-3, 103),
        ylim=(-3, 103),
        xlabel="real success rate (%)",
        ylabel="imagined success rate (%)",
        aspect="equal",
        title="Real vs imagined success per policy",
    )
    ax.grid(alpha=0.3)
    return _png(fig)


def response_curve_figure(axis: str, points: list[dict]) -> Figure:
    """Real and imagined success (%) against one knob's values, ID and OOD apart: `points` are
    [{value, real: {split: rate}, imagined: {split: rate}}] (a response-curve benchmark's `curves`)."""
    points = sorted(points, key=lambda p: p["value"])
    values = [p["value"] for p in points]
    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for split, color in (("id", "#1f77b4"), ("ood", "#d62728")):
        if not all(split in p["real"] for p in points):
            continue
        label = SPLITS.get(split, split)
        ax.plot(values, [100 * p["real"][split] for p in points], "-o", color=color, label=f"real, {label}")
        ax.plot(values, [100 * p["imagined"][split] for p in points], "--s", color=color, alpha=0.7,
                label=f"imagined, {label}")  # fmt: skip
    ax.set(xlabel=axis, ylabel="success (%)", ylim=(-3, 103), title=f"Response to {axis}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _response_curves(results: dict) -> list[str]:
    """A section with one response-curve plot per axis, where the results hold curves."""
    curves = results.get("response_curves") or {}
    if not curves:
        return []
    return [
        "<h2>Response curves</h2><p>Success against each knob of the base policy: real (solid) and imagined "
        "(dashed), ID and OOD.</p>",
        *(f"<figure>{_png(response_curve_figure(axis, points))}</figure>" for axis, points in curves.items()),
    ]


def _position_map(policy: dict) -> str:
    """Success against initial object position: real outcome beside the imagined success fraction."""
    episodes = [e for e in policy.get("episodes", []) if e.get("initial_xy") is not None]
    if not episodes:
        return f'<p class="muted">{_e(policy["name"])}: no episodes with an initial position.</p>'
    xy = np.array([e["initial_xy"] for e in episodes], dtype=float)  # (N,2)
    real = np.array([float(bool(e.get("real_success"))) for e in episodes])
    imagined = np.array(
        [np.nan if e.get("imagined_success") is None else e["imagined_success"] for e in episodes]
    )
    near = np.array([bool(e.get("near_miss")) for e in episodes])
    split = np.array([str(e.get("split", "all")) for e in episodes])
    centre, half = (xy.max(0) + xy.min(0)) / 2, 0.6 * (xy.max(0) - xy.min(0)).max() + 0.01  # square, padded
    mean = f"{np.nanmean(imagined):.2f}" if np.isfinite(imagined).any() else "–"
    fig = Figure(figsize=(9, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, values, title in (
        (axes[0], real, f"real: {int(real.sum())}/{len(real)} succeeded"),
        (axes[1], imagined, f"imagined: mean success {mean}"),
    ):
        for s in np.unique(split):
            sel = (split == s) & np.isfinite(values)  # no dot where the imagined fraction is unknown
            points = ax.scatter(
                *xy[sel].T,
                c=values[sel],
                cmap="RdYlGn",
                vmin=0,
                vmax=1,
                s=70,
                marker=MARKERS.get(s, "D"),
                edgecolors=np.where(near[sel], "k", "#666"),
                linewidths=np.where(near[sel], 2.0, 0.5),
            )
        ax.set(
            title=title,
            xlabel="initial x",
            ylabel="initial y",
            aspect="equal",
            xlim=(centre[0] - half, centre[0] + half),
            ylim=(centre[1] - half, centre[1] + half),
        )
        ax.grid(alpha=0.3)
    fig.colorbar(points, ax=axes, label="success (fraction of samples)", shrink=0.9)
    axes[0].legend(handles=_map_legend(np.unique(split), near.any()), loc="best", fontsize=8)
    return f"<figure><figcaption>{_e(policy['name'])}</figcaption>{_png(fig)}</figure>"


def _map_legend(splits: np.ndarray, near_misses: bool) -> list[Line2D]:
    """One marker per ID/OOD split on the map, and the near-miss ring if any episode has one."""
    handles = [
        Line2D([], [], color="#777", marker=MARKERS.get(s, "D"), linestyle="", label=SPLITS.get(s, s))
        for s in splits
    ]
    if near_misses:
        ring = dict(color="w", marker="o", markeredgecolor="k", markeredgewidth=2, linestyle="")
        handles.append(Line2D([], [], label="near miss", **ring))
    return handles


def _video(policy: dict, entry: dict, root: Path, rank_json: Path) -> str:
    """A <figure> with the video inline as a data URI, after checking a browser can decode it."""
    path = root / entry["path"]
    episode = entry.get("episode", "?")
    where = f"video {str(path)!r} of policy {policy['name']!r} (episode {episode}, listed in {rank_json})"
    if not path.is_file():
        raise FileNotFoundError(
            f"{where} does not exist; re-run r2s2r-rank to write it, or drop it from 'videos'."
        )
    mime = VIDEO_MIME.get(path.suffix.lower())
    with av.open(str(path)) as container:
        codec = container.streams.video[0].codec_context.name if container.streams.video else None
    if mime is None or codec not in BROWSER_CODECS:
        raise ValueError(
            f"{where} is {path.suffix} with codec {codec}; browsers play MP4/WebM with "
            f"{sorted(BROWSER_CODECS)}; write it with r2s2r.eval.video (h264 MP4)."
        )
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    caption = f"{policy['name']} · episode {entry.get('episode', '?')}"
    if entry.get("label"):
        caption += f" · {entry['label']}"
    return (
        f'<figure><video controls preload="metadata" src="data:{mime};base64,{data}"></video>'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _machine(results: dict) -> str:
    """The run's provenance as a collapsed list."""
    items = "".join(
        f"<li>{_e(k)}: {_e(v if isinstance(v, str) else json.dumps(v))}</li>"
        for k, v in (results.get("machine") or {}).items()
    )
    return f"<details><summary>machine</summary><ul>{items}</ul></details>" if items else ""


def _object_poses(results: dict) -> str:
    """Whether the imagined episodes started from the logged object poses (rank.json's note), if it says."""
    note = results.get("object_poses")
    return f'<p id="object-poses"><b>Object poses:</b> {_e(note)}</p>' if note else ""


def _success_map(results: dict, policies: list[dict]) -> str:
    """With the model's success map: each policy's real, imagined and mapped rate (all episodes) and the
    statistics of the mapped rates; nothing without one."""
    found = results.get("success_map")
    if not found:
        return ""
    pct = lambda v: "n/a" if v is None else f"{100 * v:.0f} %"  # noqa: E731
    rows = "".join(
        f'<tr><td class="name">{_e(p["name"])}</td><td>{pct(p["real"]["all"].get("rate"))}</td>'
        f"<td>{pct(p['imagined']['all'].get('rate'))}</td>"
        f"<td>{pct(p.get('imagined_mapped', {}).get('all', {}).get('rate'))}</td></tr>"
        for p in policies
    )
    return (
        "<h2>Mapped success</h2><p>The model's success map turns each imagined rate into the real rate such "
        f"rates stood for on policy families it was fitted on: {_e(found.get('source', '?'))}. Monotone: "
        "the order is kept, the levels change.</p>"
        '<table id="success-map"><thead><tr><th class="name">policy</th><th>real</th><th>imagined</th>'
        f"<th>mapped</th></tr></thead><tbody>{rows}</tbody></table>"
        f'<div class="wide">{_metrics_table(found.get("metrics") or {}, None)}</div>'
    )


def write_report(rank_json: str | os.PathLike, output: str | os.PathLike | None = None) -> Path:
    """Write the self-contained HTML report of a ranking run.

    Args:
        rank_json: results file written by r2s2r-rank; video paths in it are relative to its folder.
        output: the HTML file to write (replaced atomically); default report.html beside rank_json.

    Returns:
        The path written.
    """
    rank_json = Path(rank_json)
    results = load_rank_json(rank_json)
    output = Path(output) if output is not None else rank_json.with_name("report.html")
    policies = sorted(results["policies"], key=lambda p: (-_real_rate(p), str(p["name"])))
    splits = _splits(policies)
    videos = [_video(p, v, rank_json.parent, rank_json) for p in policies for v in p.get("videos", [])]
    body = [
        "<h1>Policy ranking in the world model vs on hardware</h1>",
        f'<p class="muted">world model {_e(results.get("checkpoint", "?"))} · '
        f"created {_e(results.get('created', '?'))}</p>{_machine(results)}",
        f'<p class="summary" id="summary">{_summary(results, policies)}</p>',
        _object_poses(results),
        "<h2>Ranking</h2><p>Sorted by real success rate; intervals in brackets, successes/trials after.</p>",
        f'<div class="wide">{_ranking_table(policies, splits)}</div>',
        "<h2>Ranking metrics</h2><p>World model vs hardware per split; the noise floor is the same "
        "statistic between two independent real runs, the best a simulator can be expected to reach.</p>",
        f'<div class="wide">{_metrics_table(results.get("metrics") or {}, results.get("noise_floor"))}</div>',
        _success_map(results, policies),
        f"<h2>Real vs imagined success</h2><figure>{_scatter(policies, splits)}</figure>",
        *_response_curves(results),
        "<h2>Success by initial position</h2><p>Left: real outcome; right: fraction of imagined samples "
        "that succeeded from the same start. Black rings: near misses.</p>",
        *(_position_map(p) for p in policies),
        "<h2>Videos</h2><p>Real (left) beside imagined (right).</p>",
        *(videos or ['<p class="muted">rank.json lists no videos.</p>']),
    ]
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>r2s2r ranking report</title><style>{CSS}</style></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, page)
    return output
