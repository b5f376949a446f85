"""mkdocs hook: the repository files that docs/ links to from outside it, in the site too.

The pages are written to be read on GitHub as well, so a page links to a benchmark sitting as
`../bench/results/x.md` and to the manifest as `../manifest.yml`. mkdocs only knows files
under docs/ and would call those links broken. This hook adds every such file to the site at
its repository path with docs/ taken off (docs/slack.md is slack.md, bench/results/x.md stays
bench/results/x.md), as a page when it is Markdown, and rewrites each relative link to match,
so that `mkdocs build --strict` checks those links and their anchors like any other.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?)([^)\s>#]+)")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _site_path(repo_path: str) -> str:
    """Where a repository file is in the site: docs/x.md is x.md; anything else keeps its path."""
    return repo_path[len("docs/") :] if repo_path.startswith("docs/") else repo_path


def _repo_path(src_uri: str, added: set[str]) -> str:
    return src_uri if src_uri in added else f"docs/{src_uri}"


def _targets(markdown: str, page_repo_path: str) -> list[str]:
    """Repository paths of the files outside docs/ that a page links to."""
    found = []
    for target in _link_targets(markdown):
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target))
        if not repo_path.startswith(("docs/", "../")) and (ROOT / repo_path).is_file():
            found.append(repo_path)
    return found


def _link_targets(markdown: str) -> list[str]:
    targets, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            targets += [m.group(2) for m in LINK.finditer(line) if not EXTERNAL.match(m.group(2))]
    return targets


def _dest_uri(repo_path: str, use_directory_urls: bool) -> str | None:
    if posixpath.basename(repo_path) != "README.md":
        return None  # mkdocs' own choice
    stem = repo_path[: -len(".md")]
    return f"{stem}/index.html" if use_directory_urls else f"{stem}.html"


_added: set[str] = set()


def on_files(files: Files, config) -> Files:
    """Add the files outside docs/ that pages link to, and those their pages link to in turn."""
    _added.clear()
    pending = [f"docs/{f.src_uri}" for f in files.documentation_pages()]
    while pending:
        page = pending.pop()
        for repo_path in _targets((ROOT / page).read_text(encoding="utf-8"), page):
            if repo_path in _added:
                continue
            _added.add(repo_path)
            files.append(
                File(
                    repo_path,
                    src_dir=str(ROOT),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                    # README.md would be an index page and clash with docs/index.md.
                    dest_uri=_dest_uri(repo_path, config["use_directory_urls"]),
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
            if repo_path.endswith(".md"):
                pending.append(repo_path)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Rewrite each relative link from the page's repository path to its site path."""
    page_repo = _repo_path(page.file.src_uri, _added)
    page_dir = posixpath.dirname(_site_path(page_repo))

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if EXTERNAL.match(target) or target.startswith("/"):
            return match.group(0)
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), target))
        if repo_path.startswith("../") or not (ROOT / repo_path).exists():
            return match.group(0)  # mkdocs reports it as broken
        site_target = posixpath.relpath(_site_path(repo_path), page_dir or ".")
        return match.group(1) + site_target

    lines, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        lines.append(line if fenced else LINK.sub(rewrite, line))
    return "\n".join(lines)
