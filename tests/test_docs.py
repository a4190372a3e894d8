"""The README stays a user's guide and every committed result stays accounted for.

- README.md is at most 400 lines: the README teaches a user; docs/benchmarks.md records.
- README.md's command table has a row for every console script in pyproject.toml.
- Every JSON on the top level of benchmarks/results/ is the default output of a script in benchmarks/ and is
  cited in docs/benchmarks.md: one latest result per benchmark, none unexplained.
- Every file in benchmarks/results/archive/ is listed in the archive's README.md and cited in
  docs/benchmarks.md: an archived variant is kept only for a documented finding.
- README.md and docs/ use no session language ("issue #3", "today", "best so far").

Each check is a small function over paths and text, tested here on the repository and on a made-up tree
that breaks it, so none of them can pass by matching nothing. Text only: nothing heavy is imported.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 400
SESSION = re.compile(r"issue #|\btoday\b|best so far|this session|we tried", re.IGNORECASE)


def session_phrases(text: str) -> list[str]:
    """The session phrases in `text`, lower-cased, each once."""
    return sorted({m.group(0).lower() for m in SESSION.finditer(text)})


def missing_commands(pyproject: str, readme: str) -> list[str]:
    """Console scripts of `pyproject` with no row (| `name` |) in the README's command table."""
    scripts = tomllib.loads(pyproject)["project"]["scripts"]
    return [name for name in scripts if f"| `{name}` |" not in readme]


def script_text(benchmarks: Path) -> str:
    """The text of every benchmark script (Python and shell), studies and families included."""
    paths = sorted(p for ext in ("*.py", "*.sh") for p in benchmarks.rglob(ext) if "results" not in p.parts)
    return "\n".join(p.read_text() for p in paths)


def mentions(text: str, name: str) -> bool:
    """Whether `text` names the file `name`, not as the tail of another (rl.json is not in x_rl.json)."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}", text) is not None


def top_level_results(results: Path) -> list[str]:
    return sorted(p.name for p in results.glob("*.json"))


def unwritten(results: Path, scripts: str) -> list[str]:
    """Top-level result files that no benchmark script names (as its default output)."""
    return [name for name in top_level_results(results) if not mentions(scripts, name)]


def uncited(results: Path, docs: str) -> list[str]:
    """Top-level result files that docs/benchmarks.md does not cite as benchmarks/results/<name>."""
    return [name for name in top_level_results(results) if f"benchmarks/results/{name}" not in docs]


def archived(archive: Path) -> list[str]:
    return sorted(p.name for p in archive.iterdir() if p.is_file() and p.name != "README.md")


def unindexed(archive: Path) -> list[str]:
    """Archived files that the archive's README.md does not list (as `name`)."""
    index = (archive / "README.md").read_text() if (archive / "README.md").is_file() else ""
    return [name for name in archived(archive) if f"`{name}`" not in index]


def uncited_archive(archive: Path, docs: str) -> list[str]:
    """Archived files that docs/benchmarks.md does not cite (as archive/<name>)."""
    return [name for name in archived(archive) if f"archive/{name}" not in docs]


def docs_text() -> str:
    return (ROOT / "docs" / "benchmarks.md").read_text()


def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move findings to docs/benchmarks.md"
    )


def test_readme_lists_every_command():
    pyproject, readme = (ROOT / "pyproject.toml").read_text(), (ROOT / "README.md").read_text()
    assert missing_commands(pyproject, readme) == [], "console scripts missing from the README's table"


def test_every_top_level_result_is_written_by_a_script_and_cited():
    results = ROOT / "benchmarks" / "results"
    assert top_level_results(results), "no results JSON on the top level of benchmarks/results/"
    assert unwritten(results, script_text(ROOT / "benchmarks")) == [], (
        "results no benchmark script writes by default: name them after their script or archive them"
    )
    assert uncited(results, docs_text()) == [], "results that docs/benchmarks.md does not cite"


def test_every_archived_result_is_indexed_and_cited():
    archive = ROOT / "benchmarks" / "results" / "archive"
    assert archived(archive), "benchmarks/results/archive/ is empty"
    assert unindexed(archive) == [], "archived files missing from benchmarks/results/archive/README.md"
    assert uncited_archive(archive, docs_text()) == [], (
        "archived files no finding in docs/benchmarks.md cites: cite them or delete them"
    )


def test_readme_and_docs_use_no_session_language():
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if phrases := session_phrases(path.read_text()):
            found[str(path.relative_to(ROOT))] = phrases
    assert found == {}, f"session language (say what is, not when it was found): {found}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """A made-up tree that breaks every rule: each check names exactly the offender."""
    results, archive = tmp_path / "results", tmp_path / "results" / "archive"
    archive.mkdir(parents=True)
    for name in ("rank.json", "rank_seed1.json"):
        (results / name).write_text("{}")
    for name in ("old_rank.json", "orphan.json"):
        (archive / name).write_text("{}")
    (archive / "README.md").write_text("| `old_rank.json` | an earlier rank.py run | Ranking |\n")
    scripts = 'parser.add_argument("--out", default="benchmarks/results/rank.json")'
    docs = "Writes `benchmarks/results/rank.json`; the earlier run: `archive/old_rank.json`."

    assert unwritten(results, scripts) == ["rank_seed1.json"]
    assert unwritten(results, "default=x_rank.json") == ["rank.json", "rank_seed1.json"]
    assert uncited(results, docs) == ["rank_seed1.json"]
    assert unindexed(archive) == ["orphan.json"]
    assert uncited_archive(archive, docs) == ["orphan.json"]
    assert session_phrases("Best so far, as of today (issue #3).") == ["best so far", "issue #", "today"]
    assert session_phrases("Spearman 0.96 on the zoo (docs/benchmarks.md).") == []
    pyproject = '[project.scripts]\nr2s2r-rank = "a:main"\nr2s2r-new = "b:main"\n'
    assert missing_commands(pyproject, "| `r2s2r-rank` | rank checkpoints |") == ["r2s2r-new"]
