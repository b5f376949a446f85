"""Exit 0 when the PostgreSQL server at argv[1] accepts a connection (used by scripts/test)."""

import asyncio
import sys

import asyncpg


async def check(url: str) -> None:
    connection = await asyncpg.connect(
        url.replace("postgresql+asyncpg://", "postgresql://"), timeout=3
    )
    await connection.close()


try:
    asyncio.run(check(sys.argv[1]))
except Exception as exc:
    print(f"PostgreSQL not ready: {exc}", file=sys.stderr)
    sys.exit(1)
