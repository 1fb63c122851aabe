"""The simulation's planted-bug names, light enough for the command line to import (the faults are
``faults.FAULT_TABLE``, which imports no broker either)."""

PLANT_NAMES = ("ack-before-isr", "truncate-to-hw", "unclean-election", "unrecorded-epoch", "fenced-commit")
# The Kafka world's (trikafka.sim.kafka_world): switches in the shipped Kafka-side modules (plants.py).
KAFKA_PLANT_NAMES = ("duplicate-sequence-accepted", "fenced-epoch-accepted", "markers-before-durable",
                     "lso-ignores-open", "dup-after-failover", "stale-generation-commit",
                     "coordinator-serves-unloaded")
