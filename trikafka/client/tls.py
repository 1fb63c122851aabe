"""TLS for trikafka's clients (docs/protocol.md §18.1): the client side of a handshake, on any stream."""

from __future__ import annotations

import ssl

import trio

from .errors import BrokerConnectionError


async def tls_handshake(stream: trio.abc.Stream, context: ssl.SSLContext, host: str, port: int) -> trio.abc.Stream:
    """``stream`` under TLS once the handshake is done; a refused one is a ``BrokerConnectionError``
    naming OpenSSL's reason (an untrusted certificate, the broker's alert)."""
    tls = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await tls.do_handshake()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        await trio.aclose_forcefully(tls)
        raise BrokerConnectionError(f"TLS handshake with {host}:{port} failed: {exc.__cause__ or exc!r}") from exc
    except BaseException:
        await trio.aclose_forcefully(tls)
        raise
    return tls
