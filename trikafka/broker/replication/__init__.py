"""Replication of replicated topics: ISR bookkeeping, elections, truncation by epoch.

The modules here without I/O (``state``, ``isr``, ``election``, ``truncation``)
are the protocol's decisions; the broker wiring feeds them ZooKeeper values and
fetch results.  The protocol is documented in docs/protocol.md (replication).
"""
