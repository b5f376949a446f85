"""What the HTTP API's tests share: a token made by the real CLI, and a webhook receiver.

The token is created as an operator creates one (``approval-bot api-tokens create --json``,
a process of its own on the bot's database); the receiver is a small aiohttp server in the
test process that records every delivery and checks its signature the way a receiver should
(``bot.api.sign`` over the timestamp and the raw body, with the token's webhook secret).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.serve_process import ROOT, free_port


@dataclass
class Token:
    id: str
    token: str
    webhook_secret: str


async def create_token(
    database_url: str, workdir: Path, name: str, channels: str, *extra: str
) -> Token:
    """``approval-bot api-tokens create NAME --channels … --json``, as an operator runs it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "api-tokens",
        "create",
        name,
        "--channels",
        channels,
        "--json",
        *extra,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)},
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    created = json.loads(out)
    return Token(created["id"], created["token"], created["webhook_secret"])


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        timestamp = self.headers.get("X-Approval-Bot-Timestamp", "")
        material = timestamp.encode() + b"." + self.body
        expected = "v1=" + hmac.new(secret.encode(), material, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-Approval-Bot-Signature", ""))


@dataclass
class Receiver:
    """Records every webhook POSTed to ``url``; ``fail`` answers 500 to the next ones."""

    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    fail: int = 0
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> Receiver:
        async def hook(request: web.Request) -> web.Response:
            body = await request.read()
            if self.fail > 0:
                self.fail -= 1
                return web.Response(status=500)
            self.deliveries.append(Delivery(dict(request.headers), body))
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def for_request(self, request_id: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.json["id"] == request_id]
