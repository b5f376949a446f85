"""What a newcomer reads before the code: the licence pyproject.toml names, a changelog that
has this version, a security policy, and docs that name migrations as they are called."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
VERSIONS = ROOT / "storage" / "migrations" / "versions"


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_licence_file_is_the_apache_2_text_pyproject_names() -> None:
    assert project()["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    # The whole text, not a stub that points elsewhere.
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_a_section_for_this_version() -> None:
    version = project()["version"]
    headings = re.findall(r"^## (\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings, "no version headings"
    assert headings[0] == version, f"the newest section is {headings[0]}, pyproject says {version}"
    assert len(set(headings)) == len(headings)


def test_the_security_policy_says_how_to_report_privately() -> None:
    text = (ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in text and "Privately" in text
    assert "## Supported versions" in text and "## In scope" in text
    major_minor = ".".join(project()["version"].split(".")[:2])
    assert f"| {major_minor}.x" in text


def test_docs_name_migrations_as_they_are_called() -> None:
    """A migration named in the README, docs/ or the changelog (`0007_oauth`) is a file in
    storage/migrations/versions/ or a revision id in one; `0006_oauth` once named none."""
    known = {path.stem for path in VERSIONS.glob("0*.py")}
    for path in VERSIONS.glob("0*.py"):
        match = re.search(r'^revision = "([^"]+)"', path.read_text(), re.M)
        assert match, path
        known.add(match.group(1))
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in pages
        for name in re.findall(r"`(\d{4}_\w+)`", page.read_text())
        if name not in known
    ]
    assert wrong == []


def test_the_playground_script_installs_only_what_the_bot_runs_on_quietly() -> None:
    """`scripts/playground` on a fresh clone installs the package without its test extras
    (pytest, playwright, mypy… are scripts/test's), its pip output kept in a log unless it
    fails. (A fresh run, measured: one line before the URL, 79 s on a loaded 2-core box.)"""
    script = (ROOT / "scripts" / "playground").read_text()
    installs = [line for line in script.splitlines() if "pip install" in line]
    assert installs and all("[test]" not in line and "--quiet" in line for line in installs)
    assert "-e ." in installs[0] and "playground-install.log" in script
    commands = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not any("scripts/bootstrap" in line for line in commands)
