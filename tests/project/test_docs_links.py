"""The documentation's links, anchors and test references resolve.

README.md, every page under docs/ and the benchmark sittings under bench/results/ are read as
GitHub shows them, with the standard library only (no mkdocs: `scripts/docs build` checks the
site too, but CI runs this). Each check lists every problem it finds, as `file:line: what`:

- a relative link (or image) to a file that does not exist, an absolute one (`/x`: GitHub and
  the docs site read it differently) or one that leaves the repository;
- a link to an anchor (`#heading`) that no heading of the target file produces, by GitHub's
  rules (lowercase; punctuation dropped except `-` and `_`; each space a `-`; a repeated
  heading gets `-1`, `-2`); and a heading whose anchor on the docs site (Python-Markdown's
  slugs) would differ from GitHub's, so that one link works on both;
- a test named as `tests/<path>.py::<name>` whose file does not exist or defines no `def` /
  `async def` (or class) of that name (a parametrised id, `test_x[sqlite]`, by its base name),
  a `tests/...` file or folder that does not exist, and a test named any other way
  (`test_x.py::test_y` without its folder, `::test_y` alone, a bare `test_y`), which nothing
  could check;
- mkdocs.yml's nav naming a page that does not exist, or leaving a page of docs/ out.

Test files move; whoever moves one updates these references, and this test is what says
which one was missed.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

# The repository's top (where pyproject.toml is), wherever in tests/ this file is moved to.
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DOCS = ROOT / "docs"

FENCE = re.compile(r"^\s*(```|~~~)")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target), the target optionally followed by a "title".
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
# tests/<path>.py, then optionally ::Name::name and a parametrised id.
TEST_REFERENCE = re.compile(
    r"(?<![\w/.-])tests/((?:[\w.-]+/)*[\w.-]+\.py)((?:::[A-Za-z_]\w*)*)(\[[^\]\s`]*\])?"
)
TEST_FOLDER = re.compile(r"(?<![\w/.-])tests/((?:[\w-]+/)+)(?![\w.])")
# A test named some other way: test_x.py::y without its folder, ::test_y, or a bare test_y.
LOOSE_TEST = re.compile(
    r"(?<![\w/.<-])(?:test_\w+\.py::|::test_)|(?<![\w/.:<-])test_\w+(?![\w./>-])"
)
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?([\w./-]+\.md)\s*$")


def documents() -> list[Path]:
    found = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    found += sorted((ROOT / "bench" / "results").glob("*.md"))
    return found


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fence.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            lines.append((number, line))
    return lines


def heading_text(raw: str) -> str:
    """What a heading reads as once rendered: no code marks, links as their text, no emphasis."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = text.replace("`", "")
    return re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text).strip()


def github_slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def site_slug(text: str) -> str:
    """Python-Markdown's toc slugify, which mkdocs uses for the docs site's anchors."""
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def headings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every heading, ATX (`## x`) or setext (a line underlined with = or -)."""
    found, previous = [], (0, "")
    for number, line in prose_lines(path):
        atx = ATX_HEADING.match(line)
        if atx:
            found.append((number, heading_text(atx.group(2))))
        elif (
            SETEXT_UNDERLINE.match(line)
            and previous[0] == number - 1
            and previous[1].strip()
            and not previous[1].lstrip().startswith(("-", "*", "|", ">"))
        ):
            found.append((previous[0], heading_text(previous[1])))
        previous = (number, line)
    return found


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for _, text in headings(path):
        slug = github_slug(text)
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        result.add(slug)
    for _, line in prose_lines(path):
        result.update(HTML_ANCHOR.findall(line))
    return result


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline link, image and reference definition, outside code."""
    found = []
    for number, line in prose_lines(path):
        line = INLINE_CODE.sub("", line)
        found += [(number, target) for target in INLINE_LINK.findall(line)]
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            found.append((number, definition.group(1)))
    return found


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target))


def resolve(source: Path, target: str) -> tuple[Path | None, str, str | None]:
    """(the file a link points to, its anchor, a problem), for a relative link."""
    path_part, _, anchor = target.partition("#")
    if target.startswith("/"):
        return None, anchor, "an absolute link: write it relative to this file"
    if not path_part:
        return source, anchor, None
    resolved = (source.parent / unquote(path_part)).resolve()
    if resolved != ROOT and ROOT not in resolved.parents:
        return None, anchor, "a link that leaves the repository"
    if not resolved.exists():
        return None, anchor, "a link to a file that does not exist"
    return resolved, anchor, None


def test_relative_links_point_at_files_that_exist() -> None:
    problems = []
    for doc in documents():
        for number, target in links(doc):
            if _is_external(target):
                continue
            _, _, problem = resolve(doc, target)
            if problem:
                problems.append(f"{_name(doc)}:{number}: {problem}: {target}")
    assert not problems, "\n".join(problems)


def test_anchors_name_a_heading_of_their_page() -> None:
    problems = []
    for doc in documents():
        for number, target in links(doc):
            if _is_external(target) or "#" not in target:
                continue
            resolved, anchor, problem = resolve(doc, target)
            if problem or resolved is None or resolved.suffix != ".md" or not resolved.is_file():
                continue  # a missing file is the other test's; other files' anchors are not ours
            if anchor not in anchors(resolved):
                problems.append(
                    f"{_name(doc)}:{number}: no heading of {_name(resolved)} makes #{anchor}"
                )
    assert not problems, "\n".join(problems)


def test_headings_get_the_same_anchor_on_github_and_the_docs_site() -> None:
    problems = []
    for doc in documents():
        seen: set[str] = set()
        for number, text in headings(doc):
            github, site = github_slug(text), site_slug(text)
            if github != site:
                problems.append(
                    f"{_name(doc)}:{number}: '{text}' is #{github} on GitHub but #{site} on "
                    "the docs site: simplify the heading"
                )
            elif github in seen:
                # GitHub numbers a repeated anchor -1, the site _1: one link cannot reach both.
                problems.append(f"{_name(doc)}:{number}: a second heading makes #{github}")
            seen.add(github)
    assert not problems, "\n".join(problems)


def _defines(source: str, name: str) -> bool:
    return (
        re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b", source, re.M) is not None
    )


def test_test_references_name_tests_that_exist() -> None:
    problems = []
    for doc in documents():
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{_name(doc)}:{number}"
            covered = []
            for match in TEST_REFERENCE.finditer(line):
                covered.append(match.span())
                file = ROOT / "tests" / match.group(1)
                if not file.is_file():
                    problems.append(f"{where}: tests/{match.group(1)} does not exist")
                    continue
                source = file.read_text(encoding="utf-8")
                for name in filter(None, match.group(2).split("::")):
                    if not _defines(source, name):
                        problems.append(f"{where}: tests/{match.group(1)} has no {name}")
            for match in TEST_FOLDER.finditer(line):
                if not (ROOT / "tests" / match.group(1)).is_dir():
                    problems.append(f"{where}: tests/{match.group(1)} is not a folder")
            for match in LOOSE_TEST.finditer(line):
                if not any(start <= match.start() < end for start, end in covered):
                    problems.append(
                        f"{where}: '{match.group(0)}' names a test without its file: "
                        "write tests/<path>.py::<test_name>"
                    )
    assert not problems, "\n".join(problems)


def test_the_docs_site_nav_lists_every_page_once() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = config.split("\nnav:", 1)[1]
    in_nav = in_nav.split("\n\n", 1)[0] if "\n\n" in in_nav else in_nav
    listed = [m.group(1) for line in in_nav.splitlines() if (m := NAV_PAGE.match(line))]
    problems = [
        f"mkdocs.yml: nav names {page}, which does not exist"
        for page in listed
        if not (DOCS / page).is_file()
    ]
    problems += [
        f"mkdocs.yml: nav names {page} twice" for page in set(listed) if listed.count(page) > 1
    ]
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    problems += [
        f"mkdocs.yml: docs/{page} is not in the nav" for page in sorted(pages - set(listed))
    ]
    assert listed, "mkdocs.yml has no nav"
    assert not problems, "\n".join(problems)
