"""A small HTTP/1.1 responder for the metrics and health endpoints, on Trio streams.

Requests are parsed by ``h11`` (a sans-I/O HTTP/1.1 state machine), bounded
to ``MAX_REQUEST_HEAD_BYTES`` for the request line and headers and to
``REQUEST_TIMEOUT_S`` per connection; whatever ``h11`` refuses is answered
with its status hint (400, or 431 for a head that is too large) and the
connection closes.  One request per connection (``Connection: close``): a
scraper opens a connection per scrape anyway, and nothing has to be drained.

Routes (GET or HEAD): ``/metrics`` (Prometheus text), ``/healthz`` (200 while
the process serves HTTP at all) and ``/readyz`` (200 when ready, else 503).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Awaitable, Callable

import h11
import trio
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .receive_loop import PEER_GONE

logger = logging.getLogger(__name__)

MAX_REQUEST_HEAD_BYTES = 8 * 1024
REQUEST_TIMEOUT_S = 10.0
# After answering, unread request bytes are drained (up to this many, for up to
# LINGER_S) before the close: closing a socket with unread input sends a reset,
# which can destroy the answer before the client reads it.
LINGER_BYTES = 64 * 1024
LINGER_S = 1.0
RECEIVE_BYTES = 4096
# HTTP connections served at once; more are closed at once (scrapers are few).
MAX_CONNECTIONS = 32
SERVER_HEADER = b"trikafka"
TEXT = b"text/plain; charset=utf-8"


@dataclass(frozen=True)
class Routes:
    """What the endpoints answer: the metrics text and the readiness test."""

    metrics: Callable[[], bytes]
    is_ready: Callable[[], bool]


class HttpServer:
    """Serves ``Routes`` on ``host:port``; start with ``nursery.start(server.run)``."""

    def __init__(self, host: str, port: int, routes: Routes,
                 secure: Callable[[trio.abc.Stream, str], Awaitable[trio.abc.Stream | None]] | None = None):
        self._host = host
        self._port = port
        self._routes = routes
        self._secure = secure  # HTTPS (metrics.security.protocol SSL, §18.1): each connection's handshake
        self._limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, report the bound ``(host, port)``, then serve until cancelled."""
        try:
            listeners = await trio.open_tcp_listeners(self._port, host=self._host)
        except OSError as exc:  # name the endpoint: the broker's own port is another
            raise OSError(exc.errno, f"metrics endpoint {self._host}:{self._port}: {exc.strerror or exc}") from exc
        host, port = listeners[0].socket.getsockname()[:2]
        logger.debug("metrics and health on http://%s:%d/", host, port)
        task_status.started((host, port))
        await trio.serve_listeners(self._serve_connection, listeners)

    async def _serve_connection(self, socket_stream: trio.SocketStream) -> None:
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            await trio.aclose_forcefully(socket_stream)
            return
        stream: trio.abc.Stream | None = socket_stream
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                if self._secure is not None:
                    stream = await self._secure(socket_stream, _peer(socket_stream))
                if stream is not None and await self._answer(stream):
                    await _linger(stream)
        except PEER_GONE:
            pass
        finally:
            self._limiter.release()
            await trio.aclose_forcefully(stream if stream is not None else socket_stream)

    async def _answer(self, stream: trio.abc.Stream) -> bool:
        """Read one request and answer it; False if the peer left without a whole request."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)
        try:
            request = await _next_request(stream, conn)
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            await _respond(stream, conn, status, f"bad request: {exc}\n".encode(), head_only=False)
            return True
        if request is None:
            return False  # the peer left before a whole request head
        path = request.target.split(b"?", 1)[0]
        head_only = request.method == b"HEAD"
        if request.method not in (b"GET", b"HEAD"):
            await _respond(stream, conn, 405, b"only GET and HEAD\n", head_only, [(b"allow", b"GET, HEAD")])
        elif path == b"/metrics":
            await _respond(stream, conn, 200, self._routes.metrics(), head_only,
                           content_type=CONTENT_TYPE_LATEST.encode())
        elif path == b"/healthz":
            await _respond(stream, conn, 200, b"ok\n", head_only)
        elif path == b"/readyz":
            ready = self._routes.is_ready()
            await _respond(stream, conn, 200 if ready else 503, b"ready\n" if ready else b"not ready\n",
                           head_only)
        else:
            await _respond(stream, conn, 404, b"not found: try /metrics, /healthz or /readyz\n", head_only)
        return True


async def _next_request(stream: trio.abc.Stream, conn: h11.Connection) -> h11.Request | None:
    """The request head, or None when the peer closes first; raises ``h11.RemoteProtocolError``."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(RECEIVE_BYTES)
            conn.receive_data(bytes(data))  # b"" marks the end: h11 raises if a request was cut short
            continue
        if isinstance(event, h11.Request):
            return event
        return None  # ConnectionClosed


async def _respond(stream: trio.abc.Stream, conn: h11.Connection, status: int, body: bytes,
                   head_only: bool, extra_headers: list[tuple[bytes, bytes]] | None = None, *,
                   content_type: bytes = TEXT) -> None:
    headers = [(b"server", SERVER_HEADER), (b"content-type", content_type),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *(extra_headers or [])]
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase.encode()))
    if not head_only:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)


async def _linger(stream: trio.abc.Stream) -> None:
    """Half-close, then discard what the client still sends, so the close sends no reset (a TLS
    stream cannot half-close: it only drains)."""
    if isinstance(stream, trio.abc.HalfCloseableStream):
        await stream.send_eof()
    drained = 0
    with trio.move_on_after(LINGER_S):
        while drained < LINGER_BYTES and (data := await stream.receive_some(RECEIVE_BYTES)):
            drained += len(data)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
