"""``config schema``: the configuration file's JSON Schema, for editors (Taplo, VS Code)."""

from __future__ import annotations

import argparse
import json

from bot.cli.exits import EXIT_OK


def config_schema(args: argparse.Namespace) -> int:
    from bot.config.schema import json_schema

    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
    return EXIT_OK
