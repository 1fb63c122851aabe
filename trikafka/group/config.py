"""Group consumer settings: Pythonic names with units, mapped from 0.7's ``ConsumerConfig``.

=============================  ==============================  ==========================
0.7 property                   keyword                         note
=============================  ==============================  ==========================
``fetch.size``                 ``fetch_max_bytes``             grows for a larger message
(trikafka)                     ``max_fetch_bytes_limit``       bound of that growth
``fetcher.backoff.ms``         ``fetcher_backoff_s``           polling a plain 0.7 broker
``backoff.increment.ms``       ``fetcher_backoff_s``           0.7.0 name
(trikafka)                     ``fetch_wait_max_ms``           FETCH_WAIT long-poll bound (§9.3)
``queuedchunks.max``           ``queued_chunks_max``           fetched sets waiting for the app
``autocommit.enable``          ``autocommit_enable``
``autocommit.interval.ms``     ``autocommit_interval_s``
``autooffset.reset``           ``autooffset_reset``            ``smallest``/``largest``/other = error
``consumer.timeout.ms``        ``consumer_timeout_s``          ``None`` (0.7: -1): wait forever
``rebalance.retries.max``      ``rebalance_retries_max``
``rebalance.backoff.ms``       ``rebalance_backoff_s``
``zk.synctime.ms``             ``rebalance_backoff_s``         when no rebalance.backoff.ms
(trikafka)                     ``rebalance_coalesce_s``        watch events within this merge
``socket.timeout.ms``          ``socket_timeout_s``
``zk.sessiontimeout.ms``       ``zk_session_timeout_s``
(trikafka)                     ``num_streams``                 streams per topic of a filter
(trikafka)                     ``close_timeout_s``             bound of the final commit/release
=============================  ==============================  ==========================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from trikafka.util.settings import parse_bool

SMALLEST = "smallest"
LARGEST = "largest"


@dataclass(frozen=True)
class GroupConfig:
    """Validated group-consumer settings (see the module docstring for the 0.7 names)."""

    fetch_max_bytes: int = 1024 * 1024
    max_fetch_bytes_limit: int = 64 * 1024 * 1024
    fetcher_backoff_s: float = 1.0
    fetch_wait_max_ms: int = 1000
    queued_chunks_max: int = 10
    autocommit_enable: bool = True
    autocommit_interval_s: float = 10.0
    autooffset_reset: str = SMALLEST
    consumer_timeout_s: float | None = None
    rebalance_retries_max: int = 4
    rebalance_backoff_s: float = 2.0
    rebalance_coalesce_s: float = 0.05
    socket_timeout_s: float | None = 30.0
    connect_timeout_s: float = 10.0
    zk_session_timeout_s: float = 6.0
    num_streams: int = 1
    close_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.fetch_max_bytes <= self.max_fetch_bytes_limit:
            raise ValueError("need 0 < fetch_max_bytes <= max_fetch_bytes_limit")
        if self.queued_chunks_max < 1:
            raise ValueError("queued_chunks_max must be at least 1")
        if self.rebalance_retries_max < 1:
            raise ValueError("rebalance_retries_max must be at least 1")
        if self.num_streams < 1:
            raise ValueError("num_streams must be at least 1")
        for name in ("fetcher_backoff_s", "autocommit_interval_s", "rebalance_backoff_s",
                     "rebalance_coalesce_s", "close_timeout_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.fetch_wait_max_ms < 0:
            raise ValueError("fetch_wait_max_ms must not be negative")

    @property
    def resets_offsets(self) -> bool:
        """Whether a missing or out-of-range offset is reset (else it is an error)."""
        return self.autooffset_reset in (SMALLEST, LARGEST)

    def replace(self, **changes: Any) -> "GroupConfig":
        """A copy with ``changes`` (field name -> value) applied."""
        # Any: the fields have different types; dataclasses.replace rejects unknown names.
        return dataclasses.replace(self, **changes)


def _ms(value: str) -> float:
    return int(value) / 1000


def _timeout_ms(value: str) -> float | None:
    return None if int(value) < 0 else int(value) / 1000


# 0.7 property -> (GroupConfig field, converter from the property's text).
# Any: each converter returns its own field's type (int, float, bool, str, None).
_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "fetch.size": ("fetch_max_bytes", int),
    "fetcher.backoff.ms": ("fetcher_backoff_s", _ms),
    "backoff.increment.ms": ("fetcher_backoff_s", _ms),
    "queuedchunks.max": ("queued_chunks_max", int),
    "autocommit.enable": ("autocommit_enable", parse_bool),
    "autocommit.interval.ms": ("autocommit_interval_s", _ms),
    "autooffset.reset": ("autooffset_reset", str),
    "consumer.timeout.ms": ("consumer_timeout_s", _timeout_ms),
    "rebalance.retries.max": ("rebalance_retries_max", int),
    "rebalance.backoff.ms": ("rebalance_backoff_s", _ms),
    "socket.timeout.ms": ("socket_timeout_s", _timeout_ms),
    "zk.sessiontimeout.ms": ("zk_session_timeout_s", _ms),
}
# Accepted and ignored: identity and connection settings passed elsewhere, or
# knobs trikafka does not have.
_IGNORED_PROPERTIES = {"groupid", "consumerid", "zk.connect", "zk.connectiontimeout.ms",
                       "socket.buffersize", "shallowiterator.enable", "mirror.topics.whitelist",
                       "mirror.topics.blacklist", "mirror.consumer.numthreads"}


def group_config_from_properties(properties: Mapping[str, str],
                                 **overrides: Any) -> GroupConfig:  # Any: GroupConfig field types vary
    """A ``GroupConfig`` from 0.7 ``consumer.properties`` keys (plus keyword overrides).

    ``zk.synctime.ms`` sets the rebalance back-off unless ``rebalance.backoff.ms``
    is given (0.7.2's default rule).  Unknown keys raise ``ValueError``.
    """
    kwargs: dict[str, Any] = {}  # Any: GroupConfig fields of different types
    for key, value in properties.items():
        text = str(value).strip()
        if key in _PROPERTIES:
            name, convert = _PROPERTIES[key]
            kwargs[name] = convert(text)
        elif key == "zk.synctime.ms":
            kwargs.setdefault("rebalance_backoff_s", _ms(text))
        elif key not in _IGNORED_PROPERTIES:
            raise ValueError(f"unknown consumer property {key!r}")
    if "rebalance.backoff.ms" in properties:
        kwargs["rebalance_backoff_s"] = _ms(str(properties["rebalance.backoff.ms"]).strip())
    kwargs.update(overrides)
    return GroupConfig(**kwargs)
