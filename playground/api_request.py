"""Another system asks the playground's people, over the HTTP API (issue 20 section 2).

Run it beside ``approval-bot playground`` (same ``--data-dir``; ``--url`` is the bot's, which the
playground logs at start: "the HTTP API is at …"): it makes an API token on the
playground's database (as ``approval-bot api-tokens create`` would), sends ``POST
/api/v1/approvals`` the way a pipeline or an agent framework would, and waits for the
decision by long-poll with :class:`bot.client.ApprovalClient`. The card appears in the
playground's #ops; decide it there and the script prints the decision::

    .venv/bin/python -m playground.api_request --url http://127.0.0.1:PORT \\
        [--data-dir data/playground] [--action "Deploy shop 4.2"] [--question]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from bot.api.tokens import hash_token, new_token
from bot.client import ApprovalClient
from bot.clock import utcnow
from playground.app import CHANNEL
from storage.repository import Repository


async def make_token(data_dir: Path) -> str:
    repo = await Repository.open(f"sqlite+aiosqlite:///{data_dir / 'approval-bot.db'}")
    try:
        token_id, token, secret = new_token()
        await repo.create_api_token(
            id=token_id,
            name="playground-script",
            token_hash=hash_token(token),
            webhook_secret=secret,
            channels=[CHANNEL],
            team_id="",
            requester="playground-script",
            expires_at=None,
            now=utcnow(),
        )
        return token
    finally:
        await repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", required=True, help="the bot's URL the playground logs (the HTTP API is at …)"
    )
    parser.add_argument("--data-dir", default="data/playground")
    parser.add_argument("--action", default="Deploy shop 4.2 to production")
    parser.add_argument("--question", action="store_true", help="ask a question instead")
    parser.add_argument("--person", default="U0APPROVER1", help="who decides (bo)")
    args = parser.parse_args()
    token = asyncio.run(make_token(Path(args.data_dir).resolve()))
    client = ApprovalClient(args.url, token)
    print(f"asking in {CHANNEL} of the playground; decide it there …", flush=True)
    if args.question:
        answerers = [args.answerer] if args.answerer else None
        result = client.ask(
            CHANNEL, "Which region first?", ["eu-west", "us-east"], answerers=answerers
        )
    else:
        result = client.request_approval(
            CHANNEL,
            args.action,
            {"service": "shop", "version": "4.2"},
            approvers=[args.person],
            ttl="30m",
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
