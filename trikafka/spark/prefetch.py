"""Run a task's fetch-and-decode loop one step ahead of Spark, in a thread.

A Spark task alternates between waiting for the broker (a fetch round trip)
and waiting for the JVM (writing a RecordBatch into its socket).  With the
loop in a thread, the next fetch and its decoding happen while the task
thread hands the previous batch to the JVM: both waits release the GIL, so
they overlap with the other thread's work instead of adding up.

The queue is bounded (``depth`` chunks), so memory stays within a few
fetches.  Errors from the loop surface in the consumer, in order, after the
chunks that preceded them; closing the consumer early (``limit()``, a
failed task) stops the thread at its next chunk.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")
_DONE = object()
_POLL_S = 0.1  # how often a blocked producer checks that the consumer is still there


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def prefetched(chunks: Iterator[T], depth: int = 2, *, name: str = "trikafka-prefetch") -> Iterator[T]:
    """Yield what ``chunks`` yields, produced up to ``depth`` items ahead in a daemon thread.

    ``chunks`` runs entirely in that thread (so it must not share a
    non-thread-safe resource with the consumer while running).
    """
    assert depth >= 1
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def hand_over(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not hand_over(chunk):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            hand_over(_Failure(exc))
            return
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # a generator stopped early runs its cleanup here, in its own thread
        hand_over(_DONE)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
