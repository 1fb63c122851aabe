"""One Kafka-protocol connection (docs/protocol.md §16.2).

Requests are handled one at a time in arrival order, as a Kafka broker does;
their answers go through one queue to the connection's sender task, so
responses leave in request order while a deferred answer (acks -1) waits and
the reader goes on reading and appending the requests after it.  A deferred
answer that can say when it is ready (``ReadyLater``: an acks -1 Produce's)
and that nothing waits ahead of is held out of the queue until then (or its
deadline), so the sender wakes once for it, to send it.  Frames
already received are parsed in one go, so a pipelining producer costs one
socket read per batch of requests.
A frame over ``max_request_bytes``, a header or body that does not decode, or
an api or version outside the table closes the connection (logged in one
line; ApiVersions at an unknown version is answered, §16.2).  A request that
fails inside the broker closes its connection with the traceback logged; the
broker goes on serving the others.
"""

from __future__ import annotations

import contextvars
import logging
import math
import time
from typing import Awaitable, Callable, Protocol, cast

import trio

from trikafka.kafka.errors import KafkaCodecError, UnsupportedRequest
from trikafka.kafka.framing import FrameReader, Request, parse_request, unsupported_version_response
from trikafka.wire.responses import Chunk

from ..quotas import NO_CHARGE, REQUEST_CHARGE, Charge, ClientQuotas
from ..receive_loop import PEER_GONE, RECEIVE_BYTES, ReceiveLoop
from ..sendfile import RegionTruncatedError, send_chunks
from .authentication import SASL_APIS, SaslFailedAnswer, SaslGate, SaslRefused


logger = logging.getLogger(__name__)



# An answer that is not ready yet: a Produce with acks -1, appended, waiting for the ISR.
Deferred = Callable[[], Awaitable[list[Chunk]]]


class ReadyLater(Protocol):
    """A ``Deferred`` that says when awaiting it no longer waits (``produce.Acknowledged``)."""

    def __call__(self) -> Awaitable[list[Chunk]]: ...

    def when_ready(self, callback: Callable[[], None]) -> float | None:
        """Call ``callback()`` once ready (never before this returns), unless the deadline returned passes
        first; None, calling nothing, when ready now."""

    def cancel(self) -> None:
        """Drop the callback, if it was not called."""

# How many answers may wait for the sender per connection before the reader stops reading
# (Kafka's queued.max.requests); a client's own in-flight limit is usually far lower.
MAX_ANSWERS_WAITING = 500

# One answer in the sender's queue: (api key to observe, None for none; when its request was
# handled; the chunks, a deferred answer, or a barrier the sender sets once everything before
# it is sent).
Queued = tuple["int | None", float, "list[Chunk] | Deferred | trio.Event"]

# The peer ("host:port", "?" when unknown) of the connection whose request is being handled: each
# connection's task sets it, so the group coordinator can name a member's host (§17.6).
CLIENT_PEER: contextvars.ContextVar[str] = contextvars.ContextVar("kafka_client_peer", default="?")

# The principal ("User:NAME") on whose behalf the request being handled runs (§18): the
# connection's task sets it once TLS or SASL has named the client; a plaintext connection with
# no authentication is Kafka's anonymous user.  The authorizer reads it.
ANONYMOUS = "User:ANONYMOUS"
# How long a connection whose authentication failed waits for its client to close first (§18.4).
FAILED_AUTHENTICATION_LINGER_S = 1.0
CLIENT_PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("kafka_client_principal", default=ANONYMOUS)


class KafkaDispatch(Protocol):
    """Where a connection's requests go (``KafkaService``)."""

    max_request_bytes: int
    quotas: ClientQuotas  # the client quotas in force (§20.2)

    async def handle(self, request: Request) -> list[Chunk] | None | Deferred:
        """The answer's chunks, None for a request that has none, or a deferred answer."""

    def observe(self, api_key: int, seconds: float) -> None:
        """One request's latency."""


class ServedKafkaConnection:
    """Serves one stream of the Kafka listener until the peer leaves, breaks the protocol, or shutdown."""

    def __init__(self, service: KafkaDispatch, stream: trio.abc.Stream, peer: str = "?", gate: SaslGate | None = None):
        self.stream = stream
        self.peer = peer
        self._service = service
        # A SASL listener's connection (§18.2): until authenticated, the gate sees every request,
        # frames are bounded by its smaller limit and the whole handshake by its timeout (§18.4).
        self._gate = gate
        self._reader = FrameReader(service.max_request_bytes if gate is None else gate.max_request_bytes)
        self._handshake_scope = trio.CancelScope()  # its deadline is set by run() and lifted by authentication
        self._authenticated = gate is None
        self._receiving = ReceiveLoop(stream)
        self.requests_handled = 0
        # Answers queued for the sender task and not yet sent: while 0, the reader sends a ready
        # answer itself (the sender is idle and stays so until the reader queues one).
        self._unsent = 0
        # A deferred answer kept from the idle sender until it is ready (``_hold``), and its deadline,
        # which bounds the idle sender's wait (``_sender_wait``) so that it answers then.
        self._held: tuple[Queued, ReadyLater] | None = None
        self._held_deadline = math.inf
        self._sender_wait: trio.CancelScope | None = None
        self.close_reason: str | None = None
        self.principal = ANONYMOUS  # CLIENT_PRINCIPAL as the connection's task set it (§18)
        # KIP-219's mute (§20.2): no request of this connection is read or handled before this time;
        # a graceful shutdown lifts it (the requests already received are finished at once).
        self._muted_until_s = -math.inf
        self._mute_scope: trio.CancelScope | None = None  # the mute being waited out, if any
        self._stopping = False

    def stop(self) -> None:
        """Finish the requests already received, then close (graceful shutdown)."""
        self._stopping = True
        if self._mute_scope is not None:
            self._mute_scope.cancel()
        self._receiving.stop()

    async def run(self) -> None:
        CLIENT_PEER.set(self.peer)
        address = self.peer.rpartition(":")[0]
        if throttle_ms := self._service.quotas.connection_created(address):
            # KIP-612 (§20.2): over its address's connection_creation_rate, nothing is read from this
            # connection, and it is closed once the throttle time has passed (Kafka's delayed close).
            self.close_reason = f"connection_creation_rate of {address} over its quota"
            logger.info("closing Kafka connection from %s in %d ms: %s", self.peer, throttle_ms, self.close_reason)
            self._muted_until_s = trio.current_time() + throttle_ms / 1000
            try:
                await self._wait_unmuted()
            finally:
                await trio.aclose_forcefully(self.stream)
            return
        self.principal = CLIENT_PRINCIPAL.get()
        if self._gate is not None:
            self._handshake_scope.deadline = trio.current_time() + self._gate.handshake_timeout_s
        with self._handshake_scope:
            await self._serve()
        if self._handshake_scope.cancelled_caught:
            self.close_reason = "SASL handshake timed out"
            logger.info("closing Kafka connection from %s: not authenticated within %.1f s", self.peer,
                        self._gate.handshake_timeout_s if self._gate is not None else 0.0)

    async def _serve(self) -> None:
        try:
            await self._read_and_answer()
        except SaslRefused as exc:
            self.close_reason = str(exc)
            logger.info("closing Kafka connection from %s: %s", self.peer, exc)
        except KafkaCodecError as exc:
            self.close_reason = f"{type(exc).__name__}: {exc}"
            logger.info("closing Kafka connection from %s: %s", self.peer, exc)
        except PEER_GONE as exc:
            self.close_reason = f"peer gone: {exc!r}"
        except RegionTruncatedError as exc:
            self.close_reason = f"fetch response cut short: {exc}"
            logger.warning("closing Kafka connection from %s: %s", self.peer, exc)
        except Exception as exc:  # a request this listener failed to answer: that connection pays, not the broker
            self.close_reason = f"{type(exc).__name__}: {exc}"
            logger.exception("closing Kafka connection from %s after a failed request", self.peer)
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _read_and_answer(self) -> None:
        """Read and handle requests in this task, send their answers in order from another.

        A failed send or deferred answer stops the reading (its failure is the one raised: the
        reader's own then is only the broken queue); a failed read cancels the sender.  Neither
        cancels a request being handled.
        """
        send, receive = trio.open_memory_channel[Queued](MAX_ANSWERS_WAITING)
        sender_failed: list[Exception] = []
        reader_failed: list[Exception] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_answers, receive, sender_failed)
            try:
                async with send:
                    async def handle_received() -> None:
                        await self._handle_received(send)
                    try:
                        self.close_reason = await self._receiving.run(self._reader.feed, handle_received)
                    finally:
                        self._release_held(send)  # before the queue closes: the sender answers it
            except Exception as exc:
                reader_failed.append(exc)
                nursery.cancel_scope.cancel()
        if failed := sender_failed or reader_failed:
            raise failed[0]

    async def _send_answers(self, answers: trio.MemoryReceiveChannel[Queued], failed: list[Exception]) -> None:
        """Send each queued answer, awaiting a deferred one, oldest first, until the reader is done."""
        observe = self._service.observe
        perf_counter = time.perf_counter
        try:
            while True:
                # Idle, it waits for the queue, or for a held answer's deadline (then it answers that).
                with trio.CancelScope(deadline=self._held_deadline) as wait:
                    self._sender_wait = wait
                    try:
                        queued = await answers.receive()
                    except trio.EndOfChannel:
                        break
                    finally:
                        self._sender_wait = None
                if wait.cancelled_caught:
                    held = self._take_held()
                    if held is None:
                        continue
                    queued = held
                api_key, started_s, answer = queued
                try:
                    if isinstance(answer, trio.Event):
                        answer.set()
                    else:
                        await send_chunks(self.stream, await answer() if callable(answer) else answer)
                finally:
                    if api_key is not None:
                        observe(api_key, perf_counter() - started_s)
                self._unsent -= 1  # not after a failure: the reader never answers past an unsent one
        except Exception as exc:
            failed.append(exc)
            self._receiving.stop()  # the reader ends at its next read, or at its next answer (queue closed)
        finally:
            # Wake a reader waiting at a barrier the sender will never reach, then refuse more.
            while True:
                try:
                    _, _, answer = answers.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if isinstance(answer, trio.Event):
                    answer.set()
            answers.close()

    def _hold(self, answers: trio.MemorySendChannel[Queued], queued: Queued, later: ReadyLater) -> bool:
        """Keep ``queued`` (its answer ``later``) from the idle sender until it is ready: the sender then
        wakes once, to send it, not also to start waiting for it (§16.2).  False when it is ready now."""
        deadline = later.when_ready(lambda: self._release_held(answers))
        if deadline is None:
            return False
        self._held, self._held_deadline = (queued, later), deadline
        if self._sender_wait is not None:
            self._sender_wait.deadline = deadline
        return True

    def _take_held(self) -> Queued | None:
        """The held answer, if any, now the sender's to await (its callback dropped)."""
        if self._held is None:
            return None
        (queued, later), self._held = self._held, None
        later.cancel()
        self._held_deadline = math.inf
        if self._sender_wait is not None:
            self._sender_wait.deadline = math.inf
        return queued

    def _release_held(self, answers: trio.MemorySendChannel[Queued]) -> None:
        """Queue the held answer, if any (it is the queue's only one: never blocks).  Runs in a flush's
        completion too: it never raises (a queue closed by a failed sender drops it)."""
        held = self._take_held()
        if held is not None:
            try:
                answers.send_nowait(held)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                pass

    async def _queue(self, answers: trio.MemorySendChannel[Queued], queued: Queued) -> None:
        """Queue an answer for the sender, after a held one: at once while the queue has room (the reader
        goes on to the next request, and its next read or send is its checkpoint), else waiting for room."""
        self._release_held(answers)
        try:
            answers.send_nowait(queued)
        except trio.WouldBlock:
            await answers.send(queued)

    async def _handle_received(self, answers: trio.MemorySendChannel[Queued]) -> None:
        """Handle every request received whole, in order, queueing each answer for the sender.

        A deferred answer (acks -1) waits in the queue while the requests after
        it are handled, these received and those still to come: the Produce
        requests a client pipelines are all appended before their
        acknowledgements are awaited.
        """
        service = self._service
        perf_counter = time.perf_counter
        while (frame := self._reader.next_frame()) is not None:
            await self._wait_unmuted()
            try:
                request = parse_request(frame)  # any other KafkaCodecError closes the connection
            except UnsupportedRequest as exc:
                answer = unsupported_version_response(exc)
                if answer is None:
                    raise
                self.requests_handled += 1
                self._unsent += 1
                await self._queue(answers, (None, 0.0, [answer]))
                continue
            self.requests_handled += 1
            started_s = perf_counter()
            gate = self._gate
            if gate is not None and (not gate.authenticated or request.api in SASL_APIS):
                if self._unsent:  # the gate may answer on the stream itself: the sender must be idle
                    sent = trio.Event()
                    self._unsent += 1
                    await self._queue(answers, (None, 0.0, sent))
                    await sent.wait()
                gated = await self._through_gate(gate, request)
                if gated is not None:
                    await send_chunks(self.stream, gated)
                    continue
            charge = self._charge(request, len(frame))
            REQUEST_CHARGE.set(charge)
            answer_or_later = await service.handle(request)
            if charge.mute_ms:
                self._muted_until_s = max(self._muted_until_s, trio.current_time() + charge.mute_ms / 1000)
            if answer_or_later is None or (self._unsent == 0 and not callable(answer_or_later)):
                # Nothing queued: the sender is idle, and this task answers without a hand-over.
                try:
                    if answer_or_later is not None:
                        await send_chunks(self.stream, answer_or_later)
                finally:
                    service.observe(request.api_key, perf_counter() - started_s)
                continue
            self._unsent += 1
            # Held when no answer waits in the queue: the sender may still be sending an earlier one,
            # which leaves before this one whatever happens.
            queued = (request.api_key, started_s, answer_or_later)
            if (self._held is None and hasattr(answer_or_later, "when_ready")
                    and not answers.statistics().current_buffer_used
                    and self._hold(answers, queued, cast(ReadyLater, answer_or_later))):
                continue
            await self._queue(answers, queued)
        await self._wait_unmuted()

    def _charge(self, request: Request, request_bytes: int) -> Charge:
        quotas = self._service.quotas
        if not quotas.active:
            return NO_CHARGE
        return Charge(quotas, self.principal.partition(":")[2], request.client_id or "", request_bytes)

    async def _wait_unmuted(self) -> None:
        """While throttled (§20.2): handle nothing more until the mute ends; the sender task still
        sends the answers already queued, the throttled one first."""
        if trio.current_time() < self._muted_until_s and not self._stopping:
            with trio.CancelScope() as self._mute_scope:
                await trio.sleep_until(self._muted_until_s)
            self._mute_scope = None

    async def _through_gate(self, gate: SaslGate, request: Request) -> list[Chunk] | None:
        """The gate's answer (None: the service answers); a failed authentication's answer is sent
        before its ``SaslRefused`` closes the connection; success names the principal (§18.2)."""
        try:
            answer = await gate.answer(request)
        except SaslFailedAnswer as exc:
            await send_chunks(self.stream, [exc.answer])
            await self._await_peer_close(FAILED_AUTHENTICATION_LINGER_S)
            raise
        if gate.user is not None and not self._authenticated:
            self._authenticated = True
            CLIENT_PRINCIPAL.set(f"User:{gate.user}")
            self.principal = CLIENT_PRINCIPAL.get()
            self._reader.max_frame_bytes = self._service.max_request_bytes
            self._handshake_scope.deadline = math.inf
            logger.debug("Kafka connection from %s authenticated as %s", self.peer, gate.user)
        return answer

    async def _await_peer_close(self, timeout_s: float) -> None:
        """Discard what the peer sends until it closes or ``timeout_s`` passes (§18.4)."""
        with trio.move_on_after(timeout_s):
            try:
                while await self.stream.receive_some(RECEIVE_BYTES):
                    pass
            except PEER_GONE:
                pass
