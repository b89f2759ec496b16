"""benchmarks/ stays readable: its links resolve, the sections other files name exist, and it stays small.

* every relative Markdown link of ``benchmarks/*.md``, ``benchmarks/records/**/*.md`` and
  ``docs/experiments/*.md`` points at a file that exists, and a ``#anchor`` into a Markdown file at one of its
  headings (GitHub's anchor rule);
* wherever README.md, ``docs/**/*.md``, attnkit's sources or the benchmark scripts name a history page
  (``docs/experiments/PAGE.md``), the page exists, and a title quoted right after it (``docs/experiments/mt.md,
  "Tuning runs"``) begins a heading of that page;
* ``ls benchmarks`` shows at most 40 entries (the scripts, README.md, RESULTS.md, records/) and RESULTS.md holds at
  most 400 lines (issue #42);
* README.md names every script at the top level, links every ``records/<topic>/`` folder and names every topic
  (``## `` section) of RESULTS.md, so that a newcomer finds each from it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
HISTORY = ROOT / "docs" / "experiments"
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGE_AND_TITLE = re.compile(r"docs/experiments/(\w+)\.md`{0,2}(?:[,)]?[\s#，（(]*[\"“]([^\"”]+)[\"”])?")


def _md_pages() -> list[Path]:
    return sorted([*BENCH.glob("*.md"), *BENCH.glob("records/**/*.md"), *HISTORY.glob("*.md")])


def _headings(path: Path) -> list[str]:
    lines, fenced, out = path.read_text(encoding="utf-8").splitlines(), False, []
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#+ (.*)$", line)):
            out.append(" ".join(m.group(1).split()))
    return out


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_pages_are_found():
    names = {p.name for p in _md_pages()}
    assert {"README.md", "RESULTS.md", "mt.md", "cpu_speed.md", "speed.md"} <= names


@pytest.mark.parametrize("page", _md_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):  # http:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in {_anchor(h) for h in _headings(file)}:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to what does not exist: {broken}"


def _citing_files() -> list[Path]:
    return [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("attnkit/**/*.py"), *BENCH.glob("*.py")]


def test_named_history_pages_and_sections_exist():
    wrong, seen = [], 0
    for file in _citing_files():
        for page, title in PAGE_AND_TITLE.findall(file.read_text(encoding="utf-8")):
            seen += 1
            target = HISTORY / f"{page}.md"
            if not target.exists():
                wrong.append(f"{file.relative_to(ROOT)}: docs/experiments/{page}.md")
                continue
            title = " ".join(re.sub(r"\n\s*#", " ", title).split()).replace("...", "").rstrip(" ,.")
            if title and not any(h.startswith(title) for h in _headings(target)):
                wrong.append(f"{file.relative_to(ROOT)}: \"{title}\" in docs/experiments/{page}.md")
    assert seen >= 20, "too few references to docs/experiments/ parsed"
    assert not wrong, f"references to history pages or sections that do not exist: {wrong}"


def test_the_title_parser_reads_the_forms_in_use():
    assert PAGE_AND_TITLE.findall('(docs/experiments/mt.md, "Tuning runs")') == [("mt", "Tuning runs")]
    assert PAGE_AND_TITLE.findall('(docs/experiments/mt.md,\n# "Annealing on the in-domain pairs": at') == [
        ("mt", "Annealing on the in-domain pairs")]
    gpu = PAGE_AND_TITLE.findall('(``docs/experiments/gpu.md``, "Host-bound on a\nGPU")')
    assert gpu == [("gpu", "Host-bound on a\nGPU")]
    zh = PAGE_AND_TITLE.findall("（docs/experiments/mt.md，\"Dropout for the hour\"）")
    assert zh == [("mt", "Dropout for the hour")]
    assert PAGE_AND_TITLE.findall("see docs/experiments/lm.md for how") == [("lm", "")]


def test_the_folder_stays_readable():
    entries = [p for p in BENCH.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 40, f"ls benchmarks shows {len(entries)} entries; run records go under benchmarks/records/"
    lines = len((BENCH / "RESULTS.md").read_text(encoding="utf-8").splitlines())
    assert lines <= 400, f"RESULTS.md has {lines} lines; the history goes to docs/experiments/"


def test_the_readme_names_every_script_records_folder_and_topic():
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = [p.name for p in sorted(BENCH.glob("*.py")) if f"`{p.name}`" not in readme]
    assert not scripts, f"benchmarks/README.md does not name these scripts: {scripts}"
    links = set(LINK.findall(readme))
    folders = [p.name for p in sorted((BENCH / "records").iterdir())
               if p.is_dir() and not {f"records/{p.name}/", f"records/{p.name}"} & links]
    assert not folders, f"benchmarks/README.md links no records/<topic>/ folder for: {folders}"
    flat = " ".join(readme.split()).lower()
    topics = [h for h in _headings(BENCH / "RESULTS.md")[1:] if h.lower() not in flat]
    assert not topics, f"benchmarks/README.md does not name these RESULTS.md topics: {topics}"
