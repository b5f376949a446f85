"""Round trips to PostgreSQL, counted on the wire: a loopback TCP relay between a client and
the server that counts each turn of the conversation.

A round trip is the client sending (one or more messages) and then the server answering: the
relay counts the times the bytes change direction from server to client. That is the same
for every driver (asyncpg, psycopg in or out of pipeline mode), and BEGIN and COMMIT count
like any statement. The relay runs on a thread of its own with plain sockets, so a peer that
blocks the event loop (psycopg's sync API) still talks through it. It adds latency, so it is
used only for the untimed counting cycles, never for the timed ones.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class RoundTripRelay:
    """Listens on 127.0.0.1 (a free port) and relays every connection to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self.round_trips = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="pg-round-trips", daemon=True)
        self._thread.start()

    def url(self, url: str) -> str:
        """``url`` (postgresql://user@host:port/db) pointed at the relay instead (a Unix
        socket's ``?host=`` dropped: the relay is TCP)."""
        parts = urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "host"])
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}", query=query))

    @contextmanager
    def counting(self) -> Iterator[None]:
        with self._lock:
            self.round_trips = 0
        yield

    def _serve(self) -> None:
        # per socket: (its peer, True when it is the server side)
        while not self._stop:
            for key, _ in self._selector.select(timeout=0.2):
                if key.data is None:
                    client, _ = self._listener.accept()
                    server = socket.create_connection(self._target)
                    for s in (client, server):
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    state = {"last": "server"}
                    self._selector.register(client, selectors.EVENT_READ, (server, False, state))
                    self._selector.register(server, selectors.EVENT_READ, (client, True, state))
                    continue
                source = key.fileobj
                assert isinstance(source, socket.socket)
                other, from_server, state = key.data
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for s in (source, other):
                        with suppress(KeyError, ValueError):
                            self._selector.unregister(s)
                        s.close()
                    continue
                if from_server and state["last"] == "client":
                    with self._lock:
                        self.round_trips += 1
                state["last"] = "server" if from_server else "client"
                other.sendall(data)

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
