"""cel-python's parser, built once per machine instead of once per process.

cel-python builds its lark LALR parser from its grammar the first time a condition is
compiled: ~0.17 s of CPU at every start of every command whose configuration has rules (the
configuration is checked completely, conditions included, before any command runs). lark can
save the built parser and load it in ~0.01 s; :func:`install_cached_parser` gives cel-python
that parser (through ``CELParser.CEL_PARSER``, the slot cel-python itself fills), built with
exactly cel-python's own options, and saved where only this user can write.

The file is lark's ``Lark.save`` output after one line of our own: a hash of the grammar, the
options and cel-python's, lark's and Python's versions, checked before anything is unpickled.
(lark's own ``cache=`` option is not used: its hash includes the cache file's name, so a
parser written aside and moved into place never matched, and was rewritten in place, where a
second process could read half of it.) It is a pickle, so it is read only through a file
descriptor of a regular file that is this user's and not writable by others, in a folder
(opened once, as a descriptor: a path swapped after the check is not followed) that is this
user's and not writable by others. It is written aside (0600, whatever the umask) and moved
into place, so two processes never read each other's half-written file. Anything else (no
home, a read-only disk, someone else's file or folder, a damaged or partial file, another
version's) builds the parser as cel-python would, never fails the command.
tests/bot/test_rules_parser_cache.py checks that the loaded parser reads conditions, and reports
errors, exactly as cel-python's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lark import Lark

# Where the parser is kept: $XDG_CACHE_HOME/approval-bot, or ~/.cache/approval-bot.
CACHE_DIR_NAME = "approval-bot"
# Changes when what this module writes changes, so an older file is not read as a newer one.
FILE_FORMAT = "approval-bot-cel-parser-2"


def cache_dir() -> Path | None:
    """This user's private cache folder (made 0700), or None when there is none to trust."""
    with _private_folder() as found:
        return found[0] if found else None


@contextlib.contextmanager
def _private_folder() -> Iterator[tuple[Path, int] | None]:
    """The cache folder and a descriptor of it, when it is this user's and only theirs.

    Files are then opened relative to the descriptor: what was checked is what is read, even
    if the path is renamed or replaced by a link afterwards (a parent others may write)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: the XDG spec says ignore it
        base = str(Path.home() / ".cache") if os.environ.get("HOME") else ""
    if not base:
        yield None
        return
    folder = Path(base) / CACHE_DIR_NAME
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield None
        return
    try:
        trusted = _only_mine(os.fstat(fd))  # else someone could plant a pickle there
        yield (folder, fd) if trusted else None
    finally:
        os.close(fd)


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
    grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
    # cel-python's own options (celpy.celparser.CELParser.__init__), for its default runner.
    tree_class = celpy.InterpretedRunner.tree_node_class
    options: dict[str, Any] = {
        "parser": "lalr",
        "start": "expr",
        "debug": True,
        "g_regex_flags": re.M,
        "lexer_callbacks": {"IDENT": CELParser.ambiguous_literals},
        "propagate_positions": True,
        "maybe_placeholders": False,
        "priority": "invert",
        "tree_class": tree_class,
    }
    python = f"{sys.version_info[0]}{sys.version_info[1]}"
    versions = f"cel-{version('cel-python')}-lark-{lark_version}-py{python}"
    described = {**options, "lexer_callbacks": "CELParser.ambiguous_literals"}
    described["tree_class"] = f"{tree_class.__module__}.{tree_class.__qualname__}"
    header = hashlib.sha256(
        "\n".join([FILE_FORMAT, versions, repr(sorted(described.items())), grammar]).encode()
    ).hexdigest()
    name = f"{versions}.parser"
    with _private_folder() as found:
        if found is None:
            return  # cel-python builds its own
        _, folder_fd = found
        parser = _load(folder_fd, name, header)
        if parser is None:
            parser = Lark(grammar, **options)
            _save(parser, folder_fd, name, header)
    CELParser.CEL_PARSER = parser


def _load(folder_fd: int, name: str, header: str) -> Lark | None:
    from lark import Lark

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # no link, no waiting on a FIFO
    try:
        fd = os.open(name, flags, dir_fd=folder_fd)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or not _only_mine(info):  # a folder, a FIFO, others'
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as file:
        if file.readline(100) != f"{header}\n".encode():
            return None  # another version's, or not ours at all
        try:
            return Lark.load(file)
        except Exception:  # truncated or damaged (unpickling raises anything): build again
            return None


def _save(parser: Lark, folder_fd: int, name: str, header: str) -> None:
    """Written aside and moved into place, so another process never reads half of it."""
    aside = f"{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(aside, flags, 0o600, dir_fd=folder_fd)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(f"{header}\n".encode())
            parser.save(file)
        os.replace(aside, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except Exception:  # a full or read-only disk, a parser lark cannot pickle: not cached
        with contextlib.suppress(OSError):
            os.unlink(aside, dir_fd=folder_fd)
