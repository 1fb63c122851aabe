"""``prefetched``: a task's fetch loop one step ahead, in a thread."""

from __future__ import annotations

import threading

import pytest

from trikafka.spark.prefetch import prefetched


class Source:
    """A generator-backed source that records how far it got and whether it was closed."""

    def __init__(self, items, fail_after: int | None = None):  # type: ignore[no-untyped-def]
        self.items = list(items)
        self.fail_after = fail_after
        self.produced = 0
        self.closed = threading.Event()
        self.thread_names: set[str] = set()

    def __iter__(self):  # type: ignore[no-untyped-def]
        try:
            for item in self.items:
                if self.fail_after is not None and self.produced == self.fail_after:
                    raise ValueError(f"broken after {self.produced}")
                self.thread_names.add(threading.current_thread().name)
                self.produced += 1
                yield item
        finally:
            self.closed.set()


def test_items_arrive_in_order_from_another_thread():  # type: ignore[no-untyped-def]
    source = Source(range(100))
    assert list(prefetched(iter(source), depth=3, name="fetcher")) == list(range(100))
    assert source.thread_names == {"fetcher"}
    assert source.closed.is_set()


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_producer_stays_within_depth_of_the_consumer(depth):  # type: ignore[no-untyped-def]
    source = Source(range(50))
    consumed = 0
    for _ in prefetched(iter(source), depth=depth):
        consumed += 1
        # queued (depth) + the one being handed over; never more, whatever the timing
        assert source.produced - consumed <= depth + 1
    assert consumed == 50


def test_an_error_surfaces_after_the_items_before_it():  # type: ignore[no-untyped-def]
    source = Source(range(10), fail_after=4)
    got = []
    with pytest.raises(ValueError, match="broken after 4"):
        for item in prefetched(iter(source), depth=2):
            got.append(item)
    assert got == [0, 1, 2, 3]


def test_closing_early_stops_and_closes_the_source():  # type: ignore[no-untyped-def]
    source = Source(range(1000))
    consumer = prefetched(iter(source), depth=2)
    assert [next(consumer) for _ in range(3)] == [0, 1, 2]
    consumer.close()  # joins the thread
    assert source.closed.is_set()
    assert source.produced < 1000
    assert not any(t.name == "trikafka-prefetch" for t in threading.enumerate())
