"""``approval-bot playground``: run the whole bot locally in a browser, offline."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import webbrowser
from pathlib import Path

from bot.config import ConfigError


def run_playground(args: argparse.Namespace) -> int:
    from playground.app import running_playground

    data_dir = Path(args.data_dir or "data/playground").resolve()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        async with running_playground(
            data_dir=data_dir,
            host=args.host,
            port=args.port,
            model=args.model,
            config_path=args.config,
        ) as playground:
            print(f"approval-bot playground: {playground.url}", flush=True)
            print(f"data in {data_dir}; press Ctrl-C to stop", flush=True)
            if not args.no_browser:
                with contextlib.suppress(Exception):
                    webbrowser.open(playground.url)
            await stop.wait()

    try:
        asyncio.run(main())
    except ConfigError as exc:
        print(f"approval-bot: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"approval-bot: cannot start the playground: {exc}", file=sys.stderr)
        return 2
    return 0
