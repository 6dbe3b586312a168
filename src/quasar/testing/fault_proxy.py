"""FaultProxy: a TCP proxy for tests whose link can be cut and restored (Toxiproxy's "down" toxic).

Runs its own event loop on a daemon thread so a synchronous test can drive it while broker processes talk
through it: ``proxy = FaultProxy(("127.0.0.1", upstream_port)).start()``; clients connect to
``proxy.address``; :meth:`FaultProxy.cut` closes every proxied connection at once and refuses new ones
(connections are accepted and closed immediately, as a dead link looks to a reconnecting peer);
:meth:`FaultProxy.restore` accepts again; :meth:`FaultProxy.stop` closes everything. Bytes are copied as
they come; nothing is parsed.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Self

__all__ = ["FaultProxy"]

_CHUNK = 64 * 1024


class FaultProxy:
    """A cuttable TCP proxy from ``listen`` (port 0 = a free one) to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], *, listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = upstream
        self._listen = listen
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut = False
        self.port = 0
        self.connections_accepted = 0
        self.connections_refused = 0

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self._listen[0]}:{self.port}"

    def start(self) -> Self:
        """Bind and serve on the proxy's thread; returns self once listening. Raises OSError on bind failure."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, self._listen[0], self._listen[1])
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except OSError as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10.0):
            raise OSError("the fault proxy did not start within 10 s")
        if failure:
            raise failure[0]
        return self

    def cut(self) -> None:
        """Close every proxied connection and refuse new ones until :meth:`restore`."""
        self._call(self._do_cut)

    def restore(self) -> None:
        """Accept and proxy connections again."""
        self._cut = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread (bounded: 10 s). Idempotent."""
        loop = self._loop
        if loop is None or self._thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10.0)
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10.0)
        self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ the proxy's loop
    def _call(self, action: object) -> None:
        assert self._loop is not None, "start() first"

        async def run() -> None:
            action()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10.0)

    def _do_cut(self) -> None:
        self._cut = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _shutdown(self) -> None:
        self._do_cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.connections_refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        if self._cut:  # cut while connecting upstream
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.connections_accepted += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
