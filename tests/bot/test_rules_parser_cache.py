"""cel-python's parser loaded from this user's cache (bot.policy.cel_parser) reads every condition,
and reports every error, exactly as cel-python's own parser built from its grammar."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy.celparser import CELParseError, CELParser

from bot.policy.cel_parser import CACHE_DIR_NAME, cache_dir, install_cached_parser
from tests.support.serve_process import ROOT

CONDITIONS = [
    'args.env == "staging"',
    'args.env == "prod" && args.replicas > 20',
    'requester == "U0INTERN" || channel == "C0PUBLIC"',
    'has(args.env) && args.env.startsWith("prod-") ? true : false',
    "args.items.all(i, i.price < 100u) && size(args.items) >= 2",
    'args.path.matches("^/srv/[a-z]+$") && !(args.n in [1, 2, 3])',
    "args.amount / 100.0 > 2.5e3 || -args.delta < -1 || args.m % 7 == 0",
    'b"bytes" == bytes(args.raw) && {"a": 1}["a"] == 1 && null == args.x',
    "true && false || dyn(args.n) != 1 && type(args.n) == int",
    "args.ü == '''multi\nline'''",
]
BROKEN = ["args.env ==", "args.(", "1 +* 2", 'args.env == "unterminated', "&& x", "a b", "args.§"]


def parsed(parser: Any, text: str) -> tuple[str, Any]:
    try:
        tree = parser.parse(text)
    except CELParseError as exc:
        cause = exc.__context__
        token = getattr(cause, "token", None)
        return "error", (str(exc), exc.line, exc.column, repr(token), getattr(token, "type", None))
    tokens = [(t.type, str(t), t.line, t.column) for t in tree.scan_values(lambda _: True)]
    return tree.pretty(), tokens


@pytest.fixture
def own_parser() -> Iterator[None]:
    """CELParser.CEL_PARSER is cel-python's per-process slot: put back as found."""
    kept = CELParser.CEL_PARSER
    yield
    CELParser.CEL_PARSER = kept


def test_cached_parser_reads_as_cel_pythons_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parser: None
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tree_class = celpy.InterpretedRunner.tree_node_class
    CELParser.CEL_PARSER = None
    own = CELParser(tree_class=tree_class)  # built from the grammar, as cel-python does
    expected = {text: parsed(own, text) for text in CONDITIONS + BROKEN}
    for _ in ("saved", "loaded"):
        CELParser.CEL_PARSER = None
        install_cached_parser()
        assert CELParser.CEL_PARSER is not None
        cached = CELParser(tree_class=tree_class)
        assert {text: parsed(cached, text) for text in CONDITIONS + BROKEN} == expected
    (saved,) = (tmp_path / CACHE_DIR_NAME).iterdir()  # one file, no temporary left
    assert saved.suffix == ".parser"
    assert all(kind == "error" for kind, _ in (expected[text] for text in BROKEN))


def test_a_folder_others_may_write_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / CACHE_DIR_NAME
    (tmp_path / CACHE_DIR_NAME).chmod(0o777)
    assert cache_dir() is None


def test_a_saved_parser_others_may_write_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parser: None
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    CELParser.CEL_PARSER = None
    install_cached_parser()
    (saved,) = (tmp_path / CACHE_DIR_NAME).iterdir()
    saved.chmod(0o666)  # a good parser, but anyone could have written it
    planted = saved.stat().st_ino
    CELParser.CEL_PARSER = None
    install_cached_parser()
    # Not loaded: built, and saved in its place (the folder is this user's alone).
    assert saved.stat().st_ino != planted
    assert saved.stat().st_mode & 0o777 == 0o600


def test_no_cache_folder_builds_the_parser_as_cel_python_does(tmp_path: Path) -> None:
    """No home and no XDG_CACHE_HOME: a rule is still checked, its error still one line."""
    (tmp_path / "bot.toml").write_text(
        'tools = ["tests.support.ops_tools:restart_service"]\n[policies.restart_service]\n'
        '[[policies.restart_service.rules]]\nwhen = "args.env =="\napproval = "never"\n'
    )
    env = {"PATH": os.environ["PATH"], "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(tmp_path / "bot.toml"), "waits", "list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "policies.restart_service.rules[0].when: line 1, column" in done.stderr, done.stderr
    assert "the expression ends too early" in done.stderr


def test_the_second_start_loads_what_the_first_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parser: None
) -> None:
    """The saved file is loaded as it is, not built and written again (lark's own cache hashed
    the temporary file's name, so a file moved into place never matched and was rewritten in
    place at the next start, where another process could read half of it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    CELParser.CEL_PARSER = None
    install_cached_parser()
    (saved,) = (tmp_path / CACHE_DIR_NAME).iterdir()
    first = saved.read_bytes()
    identity = (saved.stat().st_ino, saved.stat().st_mtime_ns)
    CELParser.CEL_PARSER = None
    install_cached_parser()
    assert CELParser.CEL_PARSER is not None
    assert (saved.stat().st_ino, saved.stat().st_mtime_ns) == identity
    assert saved.read_bytes() == first


def test_a_group_writable_umask_still_saves_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parser: None
) -> None:
    """umask 002 (Debian's default with per-user groups) made the file 0664, which the next
    start then refused to load: the cache never worked for those users."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    CELParser.CEL_PARSER = None
    kept = os.umask(0o002)
    try:
        install_cached_parser()
    finally:
        os.umask(kept)
    (saved,) = (tmp_path / CACHE_DIR_NAME).iterdir()
    assert saved.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("damage", ["truncated", "garbage", "symlink", "fifo", "folder"])
def test_a_damaged_or_odd_file_is_replaced_by_a_built_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parser: None, damage: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    CELParser.CEL_PARSER = None
    install_cached_parser()
    (saved,) = (tmp_path / "cache" / CACHE_DIR_NAME).iterdir()
    good = saved.read_bytes()
    saved.unlink()
    if damage == "truncated":
        saved.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        saved.write_bytes(good.splitlines(keepends=True)[0] + b"\x80\x05garbage")
    elif damage == "symlink":  # even to a good file of this user's: only a file is read
        (tmp_path / "elsewhere").write_bytes(good)
        saved.symlink_to(tmp_path / "elsewhere")
    elif damage == "fifo":
        os.mkfifo(saved)
    else:
        saved.mkdir()
    CELParser.CEL_PARSER = None
    install_cached_parser()
    parser = CELParser(tree_class=celpy.InterpretedRunner.tree_node_class)
    assert parsed(parser, CONDITIONS[1])[0].startswith("expr")
    if damage != "folder":  # a folder in its place stays; the parser is built each time
        assert saved.is_file() and not saved.is_symlink()
        assert saved.read_bytes().splitlines()[0] == good.splitlines()[0]
