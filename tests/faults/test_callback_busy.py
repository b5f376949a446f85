"""A callback POST while another process holds the database's write lock answers 503 with
Retry-After in time, records nothing, and the pipeline's retry is answered 202; a retry of a
body that was recorded answers 202 again, and only another body after it answers 410.

The lock is held by a separate process (``BEGIN IMMEDIATE`` on SQLite; an exclusive lock on
``approvals`` on PostgreSQL), as a long migration, a backup or a stuck writer would; the
pipeline gives up after 10 seconds, as the one in the report did.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
from collections.abc import AsyncIterator

import aiohttp

from tests.faults.harness import PATIENCE, Deployment, eventually, quiet_sweeps, request

DEPLOY_SHOP = request(("start_deploy", {"service": "shop"}))
PIPELINE_TIMEOUT = 10.0

HOLDER = textwrap.dedent(
    """
    import asyncio, sqlite3, sys
    url = sys.argv[1]
    async def main():
        if url.startswith("sqlite:///"):
            db = sqlite3.connect(url[len("sqlite:///"):], isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
        else:
            import asyncpg
            db = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
            tx = db.transaction()
            await tx.start()
            await db.execute("LOCK TABLE approvals IN ACCESS EXCLUSIVE MODE")
        print("locked", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    asyncio.run(main())
    """
)


@contextlib.asynccontextmanager
async def approvals_locked(database_url: str) -> AsyncIterator[None]:
    """Another process holds the database's write lock (``HOLDER``: on PostgreSQL the
    ``approvals`` table in ACCESS EXCLUSIVE mode) for as long as the block runs."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        database_url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 30)).strip() == b"locked"
        yield
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        if holder.returncode is None:
            try:
                await asyncio.wait_for(holder.wait(), 10)
            except TimeoutError:
                holder.kill()
                await holder.wait()


async def pipeline_post(url: str, body: str) -> tuple[int, dict[str, str]]:
    """What a pipeline with a 10 s timeout does: POST, and give up if no answer comes."""
    timeout = aiohttp.ClientTimeout(total=PIPELINE_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, data=body, headers={"Content-Type": "text/plain"}) as response,
    ):
        return response.status, dict(response.headers)


async def test_a_callback_during_a_write_lock_answers_503_and_its_retry_202(
    deployment: Deployment,
) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    (url,) = await eventually(deployment.callback_urls, "the tool to hand out a callback URL")
    repo = await deployment.repo()
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not any(w.status == "pending" for w in await repo.pending_waits()):
        assert asyncio.get_running_loop().time() < deadline, "the run never paused"
        await asyncio.sleep(0.1)
    (wait,) = await repo.pending_waits()
    callback = f"{bot.url}/callbacks/{url.rsplit('/', 1)[1]}"

    async with approvals_locked(deployment.database_url):
        status, headers = await pipeline_post(callback, "deploy-of-shop-succeeded")
        assert status == 503, status
        assert int(headers["Retry-After"]) >= 1
    stored = await repo.get_approval(wait.id)
    assert stored is not None and stored.status == "pending", "a 503 recorded the body"

    # The pipeline's retry, once the lock is gone; then a retry of it (its answer was lost).
    assert (await pipeline_post(callback, "deploy-of-shop-succeeded"))[0] == 202
    assert (await pipeline_post(callback, "deploy-of-shop-succeeded"))[0] == 202
    await deployment.answer(asked.ts, "deploy-of-shop-succeeded")
    # Another body after the first was recorded changes nothing.
    assert (await pipeline_post(callback, "deploy-of-shop-failed"))[0] == 410
    await quiet_sweeps(deployment)

    assert len(deployment.answers(asked.ts, "deploy-of-shop-succeeded")) == 1
    assert deployment.executions("start_deploy", "shop") == 1
    stored = await repo.get_approval(wait.id)
    assert stored is not None and stored.result == "deploy-of-shop-succeeded"
    trail = [e.event for e in await repo.audit_trail(run_id=wait.run_id)]
    assert trail.count("callback_completed") == 1, trail
    assert trail.count("run_resumed") == 1, trail
