"""The cost of one authorization decision (docs/protocol.md §18.3) against the number of ACLs.

Run: ``python bench/acl_bench.py``.  Prints µs per ``Authorizer.denied`` call
(one per partition of a Produce or Fetch) for a principal that is allowed by
the last ACL of its type, with 10, 100, 1,000 and 10,000 topic ACLs of other
principals and topics beside it, and with the authorizer off; takes a few
seconds.  The matcher reads only the literal ACLs of the resource's name, the
wildcard ones and the prefixed ones of its type, so the cost stays flat as
literal ACLs of other names grow.
"""

from __future__ import annotations

import time

from trikafka.broker.kafka.acl.authorizer import Authorizer
from trikafka.broker.kafka.acl.model import AclBinding, AclSet, Operation, PatternType, Permission, ResourceType
from trikafka.broker.kafka.connection import CLIENT_PRINCIPAL
from trikafka.kafka.apis import KafkaApi

TARGET_SECONDS_PER_CASE = 0.5
COUNTS = (10, 100, 1_000, 10_000)


def acls(count: int) -> AclSet:
    others = (AclBinding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, f"User:u{i}", "*", Operation.READ,
                         Permission.ALLOW) for i in range(count - 1))
    mine = AclBinding(ResourceType.TOPIC, "orders", PatternType.PREFIXED, "User:alice", "*", Operation.WRITE,
                      Permission.ALLOW)
    return AclSet([*others, mine])


def us_per_decision(authorizer: Authorizer) -> float:
    calls, elapsed, batch = 0, 0.0, 1
    while elapsed < TARGET_SECONDS_PER_CASE:
        start = time.perf_counter()
        for _ in range(batch):
            assert authorizer.denied(KafkaApi.PRODUCE, "orders-eu") is None
        elapsed += time.perf_counter() - start
        calls += batch
        batch *= 2
    return elapsed / calls * 1e6


def main() -> None:
    CLIENT_PRINCIPAL.set("User:alice")
    print("topic ACLs\tus per decision")
    for count in COUNTS:
        authorizer = Authorizer(enabled=True)
        authorizer.replace(acls(count))
        print(f"{count}\t{us_per_decision(authorizer):.2f}")
    off = Authorizer(enabled=False)
    print(f"authorizer off\t{us_per_decision(off):.2f}")


if __name__ == "__main__":
    main()
