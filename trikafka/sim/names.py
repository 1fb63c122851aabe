"""The simulation's fault and planted-bug names, light enough for the command line to import."""

MEMBER_FAULTS = ("member-crash", "member-pause", "member-twin")  # faults of group members, not brokers
FAULTS = ("restart", "kill", "crash", "fsync-error", "stall", "isolate", "expire", "zk-outage", *MEMBER_FAULTS)
PLANT_NAMES = ("ack-before-isr", "truncate-to-hw", "unclean-election", "unrecorded-epoch", "fenced-commit")
