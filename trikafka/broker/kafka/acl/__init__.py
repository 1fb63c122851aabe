"""Authorization of the Kafka listener by access control lists (docs/protocol.md §18.3)."""
