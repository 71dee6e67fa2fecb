"""The docs stay true: generated config blocks current, no dangling reference, a short README.

(a) the config-keys table in docs/deploy.md and the Pulumi.yaml comment are what
    `python scripts/config_docs.py --write` renders from the models;
(b) every relative markdown link (and #anchor) in README.md and docs/*.md resolves, every
    `DESIGN §n` cited anywhere has a numbered heading in docs/design.md, and every `*.md`
    path that code or comments mention exists;
(c) README.md is at most 200 lines;
(d) every package and module under tts_fleet/, components/ and worker/ is named in its
    package's entry of DESIGN §2 (the layout);
(e) every `tts-fleet scaling|simulate|advise|cost` output quoted in docs/*.md is what the
    command prints today (`python scripts/doc_outputs.py --check`).
Each checker is also run on a small broken sample, so a checker that finds nothing fails.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from scripts import config_docs, doc_outputs
from tts_fleet import exit_codes
from tts_fleet.config.models import SECTIONS, Range, ScalingConfig, Schedule, StackConfig

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
README_MAX_LINES = 200
# Where code and comments live; *.md is checked as markdown instead.
SOURCE_PATTERNS = ("*.py", "*.sh", "*.yml", "*.yaml", "*.toml", "Dockerfile", "Makefile")
SKIP_DIRS = {".git", ".venv", "out", "build", "dist", "node_modules", "__pycache__"}
# This file holds deliberately broken samples for the checkers, so it is not scanned itself.
SELF = Path(__file__).resolve()

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
_DESIGN_MENTION = re.compile(r"\bDESIGN\b|design\.md")
# "DESIGN §4, §6" / "design.md §3.2" / "[DESIGN §5](design.md#...)" in markdown prose.
_MD_CITATION = re.compile(r"(?:\bDESIGN|design\.md)\]?\s?((?:§\s?\d+(?:\.\d+)*(?:,\s*)?)+)")
_MD_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)(#[\w-]+)?\b")
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")


# ---------------------------------------------------------------- markdown structure


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2) for _, line in prose_lines(path) if (m := _HEADING.match(line))]


def anchors(path: Path) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    for heading in headings(path):
        base = slug(heading)
        count = seen.get(base, 0)
        result.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return result


# ---------------------------------------------------------------- checkers


def broken_links(paths: list[Path]) -> list[str]:
    """Relative links whose file does not exist, or whose #anchor is no heading there."""
    problems: list[str] = []
    for path in paths:
        for number, line in prose_lines(path):
            for target in _LINK.findall(_INLINE_CODE.sub("", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(path.parents[1])}:{number}: {target}"
                if not linked.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    problems.append(f"{where}: no heading #{anchor} in {linked.name}")
    return problems


def design_sections(design: Path) -> set[str]:
    """The section numbers of design.md's numbered headings ("4", "5.4", ...)."""
    return {m.group(1) for h in headings(design) if (m := _NUMBERED.match(h))}


def source_files(root: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(directory) / name
            if path != SELF and any(path.match(pattern) for pattern in SOURCE_PATTERNS):
                yield path


def design_citations(path: Path) -> Iterator[tuple[int, str]]:
    """(line, section) for each `§n` on a line that names DESIGN or design.md."""
    lines = path.read_text(errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        if path.suffix == ".md":
            for group in _MD_CITATION.findall(line):
                for section in _SECTION.findall(group):
                    yield number, section
        elif _DESIGN_MENTION.search(line):
            for section in _SECTION.findall(line):
                yield number, section


def missing_sections(files: list[Path], design: Path, root: Path = ROOT) -> list[str]:
    known = design_sections(design)
    return [
        f"{path.relative_to(root)}:{number}: §{section}"
        for path in files
        for number, section in design_citations(path)
        if section not in known
    ]


def mentioned_text(path: Path) -> Iterator[tuple[int, str]]:
    """Text where a doc may be named: a .py file's comments and strings, other files whole.

    A string literal that is nothing but a file name (`"notes.md"`) is data the code
    creates or reads, not a reference to a document, so it is left out.
    """
    source = path.read_text(errors="replace")
    if path.suffix != ".py":
        yield from enumerate(source.splitlines(), 1)
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
        elif token.type == tokenize.STRING:
            body = re.sub(
                r"^[rbuf]*('''|\"\"\"|'|\")|('''|\"\"\"|'|\")$", "", token.string, flags=re.I
            )
            if not _MD_PATH.fullmatch(body):
                yield token.start[0], token.string


def missing_md_paths(files: list[Path], root: Path) -> list[str]:
    """`*.md` paths (and #anchors) named in code or comments that do not exist."""
    problems: list[str] = []
    for path in files:
        for number, text in mentioned_text(path):
            for name, anchor in _MD_PATH.findall(text):
                candidates = [root / name] if "/" in name else [root / name, root / "docs" / name]
                found = next((c for c in candidates if c.exists()), None)
                where = f"{path.relative_to(root)}:{number}: {name}{anchor}"
                if found is None:
                    problems.append(f"{where}: no such file")
                elif anchor and anchor[1:] not in anchors(found):
                    problems.append(f"{where}: no such heading")
    return problems


def missing_readme_sections(files: list[Path], readme: Path) -> list[str]:
    """`README "Some section"` in code must name a heading the README still has."""
    known = {h.lower() for h in headings(readme)}
    return [
        f"{path.relative_to(readme.parent)}:{number}: README {title!r}"
        for path in files
        for number, text in mentioned_text(path)
        for title in re.findall(r'README,? "([^"]+)"', text)
        if title.lower() not in known
    ]


# ---------------------------------------------------------------- (a) generated blocks


def test_generated_config_blocks_are_current() -> None:
    assert config_docs.stale(ROOT) == [], "run: .venv/bin/python scripts/config_docs.py --write"


def _models() -> list[type[BaseModel]]:
    return [StackConfig, *SECTIONS.values(), Range, Schedule]


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_config_field_has_a_description(model: type[BaseModel]) -> None:
    undocumented = [name for name, f in model.model_fields.items() if not f.description]
    assert undocumented == []


def test_every_stack_section_is_in_the_table() -> None:
    assert set(SECTIONS) == set(StackConfig.model_fields)
    keys = {row.key for row in config_docs.rows()}
    for section, model in SECTIONS.items():
        for name, field in model.model_fields.items():
            assert f"{section}.{field.alias or name}" in keys


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    """The two generated files, copied so a test may make them stale."""
    (tmp_path / "docs").mkdir()
    for target in config_docs.TARGETS:
        shutil.copy(ROOT / target.path, tmp_path / target.path)
    return tmp_path


def test_a_changed_description_makes_the_table_stale(
    docs_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    field = ScalingConfig.model_fields["max_workers"]
    monkeypatch.setattr(field, "description", "A different meaning.")
    assert config_docs.stale(docs_copy) == ["docs/deploy.md"]
    assert config_docs.main(["--check", "--root", str(docs_copy)]) == 1


def test_a_changed_default_makes_both_blocks_stale(
    docs_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ScalingConfig.model_fields["idle_minutes"], "default", 7)
    assert config_docs.stale(docs_copy) == ["docs/deploy.md", "Pulumi.yaml"]
    assert config_docs.write(docs_copy) == ["docs/deploy.md", "Pulumi.yaml"]
    assert (
        "| `scaling.idleMinutes` | integer, 1 to 1440 | `7` |"
        in (docs_copy / "docs/deploy.md").read_text()
    )
    assert "idleMinutes=7," in (docs_copy / "Pulumi.yaml").read_text()
    assert config_docs.main(["--check", "--root", str(docs_copy)]) == 0


def test_markers_missing_is_an_error(docs_copy: Path) -> None:
    (docs_copy / "Pulumi.yaml").write_text("name: tts-fleet\n")
    with pytest.raises(ValueError, match="config-keys:start"):
        config_docs.stale(docs_copy)


# ---------------------------------------------------------------- (b) no dangling reference


def test_relative_links_and_anchors_resolve() -> None:
    assert broken_links(markdown_files()) == []


def test_design_citations_have_numbered_headings() -> None:
    files = [*source_files(ROOT), *markdown_files()]
    assert missing_sections(files, DOCS / "design.md") == []


def test_md_paths_named_in_code_exist() -> None:
    assert missing_md_paths(list(source_files(ROOT)), ROOT) == []


def test_readme_sections_named_in_code_exist() -> None:
    assert missing_readme_sections(list(source_files(ROOT)), ROOT / "README.md") == []


def test_the_citation_scan_sees_the_code() -> None:
    # Guards against a scan that silently finds nothing: these are cited in the code today.
    cited = {s for path in source_files(ROOT) for _, s in design_citations(path)}
    assert {"3.1", "4", "5.4"} <= cited


def test_checkers_find_broken_references(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n## Real heading\n\n[ok](#real-heading) [gone](missing.md) "
        "[bad anchor](page.md#nowhere) `[in code](ignored.md)`\n\n```\n[fenced](x.md)\n```\n"
        "See DESIGN §9.9 and design.md §2.\n"
    )
    design = tmp_path / "docs" / "design.md"
    design.write_text("# Design\n\n## 2. Layout\n\n### 5.4 Heartbeat\n")
    code = tmp_path / "mod.py"
    code.write_text(
        '"""Cites DESIGN §5.4 and §7 (see use.md, docs/page.md#nope)."""\n'
        'NAME = "notes.md"  # data, not a doc; README "Gone section"\n'
    )
    assert broken_links([page]) == [
        "docs/page.md:5: missing.md: no such file",
        "docs/page.md:5: page.md#nowhere: no heading #nowhere in page.md",
    ]
    assert missing_sections([page, code], design, tmp_path) == [
        "docs/page.md:10: §9.9",
        "mod.py:1: §7",
    ]
    assert missing_md_paths([code], tmp_path) == [
        "mod.py:1: use.md: no such file",
        "mod.py:1: docs/page.md#nope: no such heading",
    ]
    readme = tmp_path / "README.md"
    readme.write_text("# tts-fleet\n\n## Kept section\n")
    assert missing_readme_sections([code], readme) == ["mod.py:2: README 'Gone section'"]


def test_slugs_follow_github() -> None:
    assert slug("`--json` output (one JSON object; keys are stable)") == (
        "--json-output-one-json-object-keys-are-stable"
    )
    assert slug("5.4 Heartbeat") == "54-heartbeat"
    assert slug("`tts-fleet deploy`: per environment") == "tts-fleet-deploy-per-environment"


def test_the_exit_code_table_in_cli_md_is_the_code_s() -> None:
    text = (DOCS / "cli.md").read_text()
    for code, meaning in exit_codes.table():
        assert f"| {code} | {meaning} |" in text


# ---------------------------------------------------------------- (c) a short README


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES


# ---------------------------------------------------------------- (d) the layout names every module

LAYOUT_ROOTS = ("tts_fleet", "components", "worker")
LAYOUT_SECTION = "2. Layout"
# A package's entry in DESIGN §2 is a list item that starts with its path: "- `tts_fleet/sim/`".
_PACKAGE_ENTRY = re.compile(r"^- `((?:[\w.-]+/)+)`")
_SPAN = re.compile(r"`([^`]+)`")


def packages(root: Path) -> dict[str, set[str]]:
    """Each directory under the layout roots that holds Python ("tts_fleet/sim/") → the file
    names of its modules, without `__init__.py`."""
    found: dict[str, set[str]] = {}
    for top in LAYOUT_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            package = path.parent.relative_to(root).as_posix() + "/"
            modules = found.setdefault(package, set())
            if path.name != "__init__.py":
                modules.add(path.name)
    return found


def section_lines(path: Path, title: str) -> list[str]:
    """The lines of the `## title` section, up to the next heading of that level or above."""
    lines = path.read_text().splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"^#{1,2} ", lines[i])), None)
    return lines[start:end]


def layout_entries(design: Path) -> dict[str, set[str]]:
    """DESIGN §2's package entries → the bare module file names (`x.py`) each one names."""
    entries: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in section_lines(design, LAYOUT_SECTION):
        if match := _PACKAGE_ENTRY.match(line):
            current = entries.setdefault(match.group(1), set())
        elif line.startswith("- ") or not line.strip():
            current = None
        if current is not None:
            for span in _SPAN.findall(line):
                current.update(w for w in span.split() if w.endswith(".py") and "/" not in w)
    return entries


def unnamed_in_layout(root: Path, design: Path) -> list[str]:
    """Packages with no entry in DESIGN §2, and modules their entry does not name."""
    entries = layout_entries(design)
    problems: list[str] = []
    for package, modules in sorted(packages(root).items()):
        if package not in entries:
            problems.append(f"{package}: no entry in DESIGN §2")
            continue
        unnamed = sorted(modules - entries[package])
        problems += [f"{package}{name}: not named in DESIGN §2" for name in unnamed]
    return problems


def test_the_layout_names_every_package_and_module() -> None:
    assert unnamed_in_layout(ROOT, DOCS / "design.md") == []


def test_the_layout_check_finds_what_is_missing(tmp_path: Path) -> None:
    for name in ("worker/__init__.py", "worker/loop.py", "worker/held.py",
                 "tts_fleet/sim/__init__.py", "tts_fleet/sim/engine.py",
                 "tts_fleet/local/events.py", "components/__init__.py"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    design = tmp_path / "design.md"
    design.write_text(
        "# Design\n\n## 2. Layout\n\n"
        "- `worker/`: `loop.py` the loop; see `tts_fleet/local/events.py`\n"
        "  and `held.py`?\n"
        "- `tts_fleet/sim/`: the simulator (`events.py` is local's)\n"
        "- `components/`: none yet\n\n"
        "## 3. Public contracts\n\n- `tts_fleet/local/`: `events.py`\n"
    )
    assert unnamed_in_layout(tmp_path, design) == [
        "tts_fleet/local/: no entry in DESIGN §2",
        "tts_fleet/sim/engine.py: not named in DESIGN §2",
    ]


# ---------------------------------------------------------------- (e) quoted command outputs


def test_quoted_command_outputs_are_current() -> None:
    # Reruns every quoted command in process: about 4 s, most of it the advise sweep.
    stale = [block.where for block in doc_outputs.stale(ROOT)]
    assert stale == [], "run: .venv/bin/python scripts/doc_outputs.py --write"


def test_the_docs_quote_the_policy_tools_outputs() -> None:
    # Guards against markers that silently match nothing, and quoted outputs without one.
    quoted = {block.command.split()[1] for block in doc_outputs.all_blocks(ROOT)}
    assert {"scaling", "advise", "cost"} <= quoted
    assert doc_outputs.unmarked(ROOT) == []


def test_a_quoted_output_without_a_marker_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\n```\n$ tts-fleet cost --stack dev\nstack dev\n```\n\n"
        "```\n$ tts-fleet submit jobs.jsonl\n```\n\n"
        "<!-- output: tts-fleet scaling -->\n```\n$ tts-fleet scaling\n```\n"
    )
    assert doc_outputs.unmarked(tmp_path) == ["docs/page.md:4"]
    assert doc_outputs.main(["--check", "--root", str(tmp_path)]) == 1


@pytest.fixture
def outputs_copy(tmp_path: Path) -> Path:
    """A root with the stack files and one doc quoting `scaling --stack dev` stale."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\n<!-- output: tts-fleet scaling --stack dev -->\n```\n"
        "$ tts-fleet scaling --stack dev\ndev: an old line\n```\n\nAfter.\n"
    )
    return tmp_path


def test_a_stale_output_is_found_and_rewritten(outputs_copy: Path) -> None:
    assert [b.where for b in doc_outputs.stale(outputs_copy)] == [
        "docs/page.md:3: tts-fleet scaling --stack dev"
    ]
    assert doc_outputs.main(["--check", "--root", str(outputs_copy)]) == 1
    assert doc_outputs.main(["--write", "--root", str(outputs_copy)]) == 0
    text = (outputs_copy / "docs" / "page.md").read_text()
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]["tts-fleet:scaling"]
    # The stack file's values, as the command prints them, replaced the old line.
    assert "dev: an old line" not in text
    assert f"maxWorkers {raw['maxWorkers']}, jobsPerWorker {raw['jobsPerWorker']}" in text
    # The prompt line and the text around the block are kept.
    assert text.startswith(
        "# Page\n\n<!-- output: tts-fleet scaling --stack dev -->\n```\n"
        "$ tts-fleet scaling --stack dev\n"
    )
    assert text.endswith("```\n\nAfter.\n")
    assert doc_outputs.main(["--check", "--root", str(outputs_copy)]) == 0


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("<!-- output: tts-fleet submit jobs.jsonl -->\n```\nx\n```\n", "is not one of"),
        ("<!-- output: tts-fleet cost -->\n\n```\nx\n```\n", "not followed by a fenced"),
        ("<!-- output: tts-fleet cost -->\n```\nx\n", "not closed"),
    ],
)
def test_a_bad_marker_is_an_error(tmp_path: Path, page: str, problem: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page)
    with pytest.raises(ValueError, match=problem):
        doc_outputs.all_blocks(tmp_path)
