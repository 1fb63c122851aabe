"""The simulation's fault and planted-bug names, light enough for the command line to import."""

FAULTS = ("restart", "kill", "crash", "fsync-error", "stall", "isolate", "expire", "zk-outage")
PLANT_NAMES = ("ack-before-isr", "truncate-to-hw", "unclean-election", "unrecorded-epoch")
