"""The HTML report opens in a real headless Chromium with every plot and video working and nothing external.

Playwright drives Debian's chromium (apt, installed by tools/install_system_deps.sh): Playwright's own
browser download is not reachable from CI, and a real browser is the only honest check that the embedded
PNGs decode, the embedded MP4 plays and the escaped text renders as text.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from playwright.sync_api import sync_playwright

from r2s2r.eval.report import write_report
from r2s2r.eval.video import write_side_by_side_views
from r2s2r.scripts.report import main as report_main

NASTY = "a<b&c"  # unescaped, "<b" would open a bold tag and "&c" would be an entity
VIDEO = "videos/nominal/episode_000003.mp4"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.fail("Chromium not found; run tools/install_system_deps.sh (it apt-installs chromium; CI does).")


def _squares(colour, T=8, size=32, step=3) -> np.ndarray:
    """(T,size,size,3) uint8: a square of `colour` moving right across a grey background."""
    frames = np.full((T, size, size, 3), 60, np.uint8)
    for t in range(T):
        frames[t, 10:20, t * step : t * step + 10] = colour
    return frames


def _rate(successes, trials, ci):
    return {"successes": successes, "trials": trials, "rate": successes / trials, "ci": ci}


def _policy(name, family, real, imagined, episodes, videos=()):
    """A policy entry with all/ID/OOD rates; `real` and `imagined` are (successes of 20 ID, of 20 OOD)."""
    entry = {"name": name, "family": family, "episodes": episodes, "videos": list(videos)}
    for side, (id_ok, ood_ok) in (("real", real), ("imagined", imagined)):
        entry[side] = {
            "all": _rate(
                id_ok + ood_ok,
                40,
                [max(0, (id_ok + ood_ok) / 40 - 0.15), min(1, (id_ok + ood_ok) / 40 + 0.15)],
            ),
            "id": _rate(id_ok, 20, [max(0, id_ok / 20 - 0.2), min(1, id_ok / 20 + 0.2)]),
            "ood": _rate(ood_ok, 20, [max(0, ood_ok / 20 - 0.2), min(1, ood_ok / 20 + 0.2)]),
        }
    return entry


def _episodes(real, imagined, near_miss=()):
    return [
        {"episode": i, "split": "id" if i % 2 else "ood", "initial_xy": [0.05 * i - 0.1, 0.5 + 0.02 * i],
         "real_success": r, "imagined_success": s, "near_miss": i in near_miss}
        for i, (r, s) in enumerate(zip(real, imagined, strict=True))
    ]  # fmt: skip


def _metrics(spearman):
    return {
        "n": 3,
        "pearson": {"value": 0.95, "ci": [0.5, 1.0]},
        "spearman": {"value": spearman, "ci": [0.5, 1.0]},
        "kendall": {"value": None, "ci": None},  # undefined statistics are null
        "mmrv": 0.02,
        "pairwise_accuracy": {"all": {"value": 1.0, "pairs": 3}, "gap_15": {"value": 1.0, "pairs": 2}},
        "calibration": {"slope": 0.9, "intercept": 0.05, "mae_points": 7.5},
    }


@pytest.fixture
def rank_json(tmp_path):
    """rank.json of three policies, listed out of order, with one real side-by-side MP4 (a near miss)."""
    top = {"top": _squares((255, 0, 0)), "wrist": _squares((0, 0, 255))}
    imagined = {"top": _squares((230, 30, 30)), "wrist": _squares((30, 30, 230))}
    write_side_by_side_views(tmp_path / VIDEO, top, imagined, fps=10)
    policies = [
        _policy("random", "scripted", (3, 1), (4, 2), _episodes([False, False, True], [0.0, 0.25, 0.5])),
        _policy(
            "nominal", "scripted", (19, 16), (18, 14),
            _episodes([True, True, False, True], [1.0, 0.75, 0.5, 1.0], near_miss={3}),
            videos=[{"episode": 3, "label": "near miss", "path": VIDEO}],
        ),
        _policy(NASTY, "act<v2>", (12, 8), (11, 9), _episodes([True, False], [0.75, 0.25])),
    ]  # fmt: skip
    results = {
        "checkpoint": "runs/x/checkpoints/last/pretrained_model",
        "created": "2026-01-01T00:00:00+00:00",
        "machine": {"host": "ci", "gpu": None},
        "policies": policies,
        "metrics": {"all": _metrics(1.0), "id": _metrics(0.5)},
        "noise_floor": {"all": _metrics(0.9)},
    }
    path = tmp_path / "rank.json"
    path.write_text(json.dumps(results))
    return path


BROWSER_CHECKS = """async () => {
  const videos = Array.from(document.querySelectorAll('video'));
  await Promise.all(videos.map(v => v.readyState >= 1 ? null : new Promise(r => {
    v.addEventListener('loadedmetadata', r); v.addEventListener('error', r);
  })));
  const frames = await Promise.all(videos.map(async v => {  // play until a frame is decoded, then read it
    if (v.error) return null;
    v.muted = true; await v.play();
    await new Promise(r => v.requestVideoFrameCallback(r)); v.pause();
    const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
    const ctx = c.getContext('2d'); ctx.drawImage(v, 0, 0);
    const px = ctx.getImageData(0, 0, c.width, c.height).data;
    let red = 0;
    for (let i = 0; i < px.length; i += 4) red += px[i] > 200 && px[i + 1] < 80 && px[i + 2] < 80;
    return red;
  }));
  return {
    images: Array.from(document.images).map(i => [i.complete, i.naturalWidth]),
    videos: videos.map((v, k) => ({ready: v.readyState, duration: v.duration, error: v.error && v.error.code,
                                   redPixels: frames[k]})),
    links: Array.from(document.querySelectorAll('[src], [href]'))
      .map(e => e.getAttribute('src') ?? e.getAttribute('href')),
    bold: document.querySelectorAll('b').length,
  };
}"""


def test_report_opens_in_chromium(rank_json):
    path = write_report(rank_json)
    assert path == rank_json.with_name("report.html")
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "rank.json",
        "report.html",
        "videos",
    ]  # no temp left
    page_html = path.read_text()
    assert "a&lt;b&amp;c" in page_html and NASTY not in page_html and "act&lt;v2&gt;" in page_html
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True)
        try:
            page = browser.new_page()
            errors = []
            page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page: {e}"))
            page.on(
                "request", lambda r: None if r.url.startswith(("data:", "file:")) else errors.append(r.url)
            )
            page.goto(path.as_uri(), wait_until="load")
            state = page.evaluate(BROWSER_CHECKS)
            names = page.locator("#ranking tbody td.policy").all_inner_texts()
            caption = page.locator("video + figcaption").all_inner_texts()
            metric_heads = page.locator("#metrics thead th").all_inner_texts()
        finally:
            browser.close()
    assert errors == []
    assert len(state["images"]) == 1 + 3  # the scatter and one position map per policy
    assert all(complete and width > 0 for complete, width in state["images"]), state["images"]
    assert len(state["videos"]) == 1
    video = state["videos"][0]
    assert video["error"] is None and video["ready"] >= 1 and video["duration"] > 0, video
    assert video["redPixels"] > 100, video  # the decoded frame shows the red square: H.264 really plays
    assert all(link.startswith(("data:", "#")) for link in state["links"]), state["links"]
    assert names == ["nominal", NASTY, "random"]  # real success 35/40, 20/40, 4/40
    assert state["bold"] == 0  # the name rendered as text, not as a <b> tag
    assert caption == ["nominal · episode 3 · near miss"]
    assert metric_heads[:3] == ["metric", "all", "ID"] and metric_heads.count("noise floor") == 1


def test_missing_video_names_file_and_policy(rank_json, capsys):
    (rank_json.parent / VIDEO).unlink()
    with pytest.raises(FileNotFoundError, match=r"episode_000003\.mp4.*policy 'nominal'.*does not exist"):
        write_report(rank_json)
    assert report_main([f"--rank_json={rank_json}"]) == 2  # the CLI says it in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("r2s2r-report: error: video") and "nominal" in err[0]
    assert not (rank_json.parent / "report.html").exists()


def test_cli_writes_report_and_explains_itself(rank_json, tmp_path, capsys):
    out = tmp_path / "out" / "ranking.html"
    assert report_main([f"--rank_json={rank_json}", f"--output={out}"]) == 0
    assert out.is_file() and str(out) in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        report_main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "self-contained HTML" in help_text and "--rank_json" in help_text and "--output" in help_text


def test_response_curves_get_one_plot_per_axis(rank_json):
    """Curves in rank.json become a section with one plot per axis, each with real and imagined lines for
    ID and OOD at the knob's values in order; without curves there is no such section."""
    from r2s2r.eval.report import response_curve_figure

    assert "Response curves" not in write_report(rank_json).read_text()
    points = [  # given out of order: the plot sorts by value
        {"value": v, "real": {"id": r, "ood": r / 2}, "imagined": {"id": i, "ood": i / 2}}
        for v, r, i in ((0.05, 0.2, 0.6), (0.0, 1.0, 0.9), (0.02, 0.7, 0.8))
    ]
    results = json.loads(rank_json.read_text())
    results["response_curves"] = {"grasp_x": points, "speed": points[:2]}
    rank_json.write_text(json.dumps(results))
    page = write_report(rank_json).read_text()
    section = page[page.index("<h2>Response curves</h2>") : page.index("<h2>Success by initial position")]
    assert section.count("<img") == 2
    lines = response_curve_figure("grasp_x", points).axes[0].get_lines()
    assert len(lines) == 4  # real and imagined, ID and OOD
    np.testing.assert_allclose(lines[0].get_xdata(), [0.0, 0.02, 0.05])
    np.testing.assert_allclose(lines[0].get_ydata(), [100, 70, 20])  # real ID, in percent
    np.testing.assert_allclose(lines[3].get_ydata(), [45, 40, 30])  # imagined OOD
