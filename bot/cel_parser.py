"""cel-python's parser, built once per machine instead of once per process.

cel-python builds its lark LALR parser from its grammar the first time a condition is
compiled: ~0.17 s of CPU at every start of every command whose configuration has rules (the
configuration is checked completely, conditions included, before any command runs). lark can
save the built parser and load it in ~0.01 s; :func:`install_cached_parser` gives cel-python
that parser (through ``CELParser.CEL_PARSER``, the slot cel-python itself fills), built with
exactly cel-python's own options, and saved where only this user can write.

The cache is lark's own (``cache=`` a file): its first line is a hash of the grammar, the
options and lark's and Python's versions, checked at load, and the file name also carries
cel-python's version. It is a pickle, so it is only read from a folder that is this user's
and not writable by others; anything else (no home, a read-only disk) builds the parser as
cel-python would. tests/test_rules_parser_cache.py checks that the loaded parser reads
conditions, and reports errors, exactly as cel-python's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from importlib.metadata import version
from pathlib import Path

# Where the parser is kept: $XDG_CACHE_HOME/approval-bot, or ~/.cache/approval-bot.
CACHE_DIR_NAME = "approval-bot"


def cache_dir() -> Path | None:
    """This user's private cache folder (made 0700), or None when there is none to trust."""
    base = os.environ.get("XDG_CACHE_HOME") or (
        str(Path.home() / ".cache") if os.environ.get("HOME") else ""
    )
    if not base:
        return None
    folder = Path(base) / CACHE_DIR_NAME
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    return folder if _only_mine(info) else None  # else someone could plant a pickle there


def _only_mine(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def install_cached_parser() -> None:
    """Give cel-python a parser loaded from (or saved to) the cache, when there is one."""
    import celpy
    from celpy.celparser import CELParser
    from lark import Lark
    from lark import __version__ as lark_version

    if CELParser.CEL_PARSER is not None:
        return
    folder = cache_dir()
    if folder is None:
        return
    python = f"{sys.version_info[0]}{sys.version_info[1]}"
    path = folder / f"cel-{version('cel-python')}-lark-{lark_version}-py{python}.parser"
    grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
    try:
        fresh = False
        if not _only_mine(path.stat()):
            return  # cel-python builds its own
    except FileNotFoundError:
        fresh = True
    except OSError:
        return
    # A new file is written aside and moved into place, so another process never reads half.
    target = path.with_suffix(f".{os.getpid()}.tmp") if fresh else path
    # cel-python's own options (celpy.celparser.CELParser.__init__), for its default runner.
    CELParser.CEL_PARSER = Lark(
        grammar,
        parser="lalr",
        start="expr",
        debug=True,
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=celpy.InterpretedRunner.tree_node_class,
        cache=str(target),
    )
    if fresh:
        with contextlib.suppress(OSError):
            os.replace(target, path)
