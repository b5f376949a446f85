"""A TCP proxy in the test process, between a bot process and its PostgreSQL server.

The bot's ``DATABASE_URL`` names the proxy's port; the proxy forwards each connection to the
real server. :meth:`TcpProxy.cut` is a database outage as the bot sees it when the network or
the server goes away: the port stops accepting (connection refused) and every open
connection is closed under the bot; :meth:`TcpProxy.restore` listens on the same port again.
Nothing else on the machine notices: other tests keep their PostgreSQL.
:meth:`TcpProxy.stall` is a server that stops answering the connections already open (a
stopped backend, a flow a firewall or a NAT dropped): what is sent on them is swallowed and
nothing comes back, while new connections are forwarded as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.engine import make_url


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # The connections open when stall() was called: forwarded no more, in either direction.
        self._stalled: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port or self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def url_for(self, database_url: str) -> str:
        """``database_url`` with its host and port replaced by the proxy's."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    async def cut(self) -> None:
        """Refuse new connections and close every open one."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()
        self._stalled.clear()

    def stall(self) -> None:
        """The connections open now forward nothing more, either way, and stay open (the
        other end hears nothing); connections opened later are forwarded."""
        self._stalled.update(self._writers)

    async def restore(self) -> None:
        """Accept and forward again, on the same port."""
        await self.start(self.port)

    async def close(self) -> None:
        await self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for w in (writer, up_writer):
                self._writers.discard(w)
                self._stalled.discard(w)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if writer in self._stalled:
                    continue  # swallowed
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def proxied(database_url: str) -> AsyncIterator[TcpProxy]:
    """A running proxy to the PostgreSQL server ``database_url`` names."""
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
