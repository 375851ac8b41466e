"""The documentation site: it builds strictly, its generated pages are what the code gives,
and every YAML example on it loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import bench_table
from e2e import figures
from harness import docgen
from harness.cli import COMMANDS
from harness.matrix.spec import matrix_from_data
from harness.scenario.model import scenario_from_data

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def test_generated_pages_are_fresh() -> None:
    assert docgen.stale(DOCS) == [], "run `python -m harness.docgen docs`"


def test_a_stale_or_missing_page_is_found(tmp_path: Path) -> None:
    assert docgen.main([str(tmp_path)]) == 0
    assert docgen.stale(tmp_path) == []
    page = tmp_path / "commands" / "compare.md"
    page.write_text(page.read_text().replace("--repeats", "--repeat"))
    (tmp_path / "reference" / "kinds.md").unlink()
    assert docgen.stale(tmp_path) == ["reference/kinds.md", "commands/compare.md"]
    assert docgen.main([str(tmp_path), "--check"]) == 1
    assert docgen.write(tmp_path) == ["reference/kinds.md", "commands/compare.md"]


def test_the_wire_page_tables_are_generated_and_list_the_new_kinds(tmp_path: Path) -> None:
    from harness.kinds import FailureKind
    from harness.scoring.markup import CALL_MARKUP

    text = (DOCS / "wire-protocol.md").read_text(encoding="utf-8")
    for kind in (FailureKind.TOOL_CALL_REFUSED_IN_HISTORY, FailureKind.FINISH_REASON_REPEATED,
                 FailureKind.USAGE_WITH_CHOICES):  # fmt: skip
        assert text.count(f"| `{kind.value}` |") == 1, kind
    for row in CALL_MARKUP:
        assert f"| `{row.name}` |" in text and row.vllm in text and row.sglang in text
    assert docgen.main([str(tmp_path)]) == 0  # the generated pages; no wire page there yet
    page = tmp_path / "wire-protocol.md"
    page.write_text(text.replace("| `usage_with_choices` |", "| `usage_on_choices` |"))
    assert docgen.stale(tmp_path) == ["wire-protocol.md"]
    assert docgen.write(tmp_path) == ["wire-protocol.md"] and page.read_text() == text
    page.write_text("# a page without its blocks\n")
    with pytest.raises(ValueError, match="wire-kinds"):
        docgen.stale(tmp_path)


def test_a_new_flag_appears_on_its_page_without_a_hand_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.cli import schema

    original = schema.add_arguments

    def more(parser: Any) -> None:
        original(parser)
        parser.add_argument("--brand-new", metavar="N", default=3, help="a flag added today")

    monkeypatch.setattr(schema, "add_arguments", more)
    page = docgen.command_page("schema")
    assert "| `--brand-new N` | `3` | a flag added today |" in page
    assert "[--brand-new N]" in page


def test_every_command_has_a_page_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"commands/{name}.md" in nav, f"mkdocs.yml: nav: add commands/{name}.md"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    missing = sorted(p for p in pages if p not in nav)
    assert not missing, f"mkdocs.yml: nav: add {', '.join(missing)}"


def test_kinds_page_lists_every_kind_once() -> None:
    from harness.kinds import FailureKind

    text = (DOCS / "reference" / "kinds.md").read_text(encoding="utf-8")
    for kind in FailureKind:
        assert text.count(f"| `{kind.value}` |") == 1, kind


def test_measured_pages_are_the_kept_figures() -> None:
    assert bench_table.main(["--check"]) == 0, "run `python -m bench.bench_table`"
    assert figures.main(["--check"]) == 0, "run `python -m e2e.figures`"


def test_a_stale_measured_table_is_found(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(bench_table.PAGE.read_text().replace("| met |", "| missed |", 1))
    assert bench_table.main(["--check", "--page", str(page)]) == 1
    assert bench_table.main(["--page", str(page)]) == 0
    assert page.read_text() == bench_table.PAGE.read_text()
    e2e_page = tmp_path / "e2e-figures.md"
    e2e_page.write_text(figures.PAGE.read_text().replace("REGRESSION", "NO CHANGE", 1))
    assert figures.main(["--check", "--page", str(e2e_page)]) == 1


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, anchor or a page left out of nav fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    assert (site / "getting-started.html").is_file()  # opened from files: one file per page
    assert (site / "commands" / "compare.html").is_file()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="getting-started.html"' in index  # not a folder (a listing, from files)
    assert "fonts.googleapis" not in index and "fonts.gstatic" not in index  # no web fonts
    assert (site / "search" / "search_index.js").is_file()  # the index inlined (offline plugin)
    assert "white-space: pre-wrap" in (site / "stylesheets" / "extra.css").read_text()


def _yaml_examples() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        for i, (lang, body) in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            if lang in ("yaml", "yml"):
                out.append((f"{page.relative_to(DOCS)}#{i}", body))
    return out


def test_the_docs_hold_yaml_examples() -> None:
    names = [name for name, _ in _yaml_examples()]
    assert any(n.startswith("scenarios.md") for n in names)
    assert any(n.startswith("boot.md") for n in names)
    assert sum(n.startswith("ci.md") for n in names) == 2


@pytest.mark.parametrize(("name", "body"), _yaml_examples(), ids=lambda x: x[:40])
def test_every_yaml_example_loads(name: str, body: str) -> None:
    """A scenario loads as a scenario, a matrix as a matrix (from examples/, as its paths
    say), a CI file parses with its jobs' steps or its pipeline's steps."""
    data = yaml.safe_load(body)
    assert isinstance(data, dict), name
    if "messages" in data:
        scenario_from_data(data)
    elif "deployments" in data:
        spec = matrix_from_data(yaml.safe_load(body), ROOT / "examples" / "docs-example.yaml")
        assert len(spec.deployments) >= 2
        assert spec.scenarios and all(Path(s).exists() for s in spec.scenarios), spec.scenarios
    elif "jobs" in data:  # GitHub Actions
        for job in data["jobs"].values():
            assert job["runs-on"] and all("run" in s or "uses" in s for s in job["steps"])
    elif "steps" in data:  # Buildkite
        assert all("command" in s and "label" in s for s in data["steps"])
    else:
        pytest.fail(f"{name}: a YAML example of no known kind (scenario, matrix, CI)")


def test_readme_is_short_and_its_links_resolve() -> None:
    """The README stays a page a newcomer reads in five minutes; its links lead somewhere."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "README.md: at most 200 lines (the manual is docs/)"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"README.md links to missing files: {missing}"
    for command in ("make compare", "make test", "make record UNFUSED="):
        assert command in text


def test_the_absolute_rule_figure_is_the_measured_one() -> None:
    """docs/pytest-plugin.md's figure of ``harness run`` without a baseline is
    ``bench/calibration/run_absolute.json``'s (``python -m bench.calibration.run_absolute``)."""
    measured = json.loads((ROOT / "bench" / "calibration" / "run_absolute.json").read_text())
    page = " ".join((DOCS / "pytest-plugin.md").read_text(encoding="utf-8").split())
    lo, hi = (round(100 * x) for x in measured["ci95"])
    figure = f"{measured['failed_sessions']} of {measured['sessions']} of its sessions"
    assert f"{figure} at fresh seeds (95% Clopper-Pearson [{lo}%, {hi}%])" in page
    assert f"--sessions {measured['sessions']}" in page
