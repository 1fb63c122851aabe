"""``trikafka sim``: run the deterministic cluster simulation for one seed or a range (docs/simulation.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import TYPE_CHECKING

from trikafka.sim.faults import FAULTS
from trikafka.sim.names import KAFKA_PLANT_NAMES, PLANT_NAMES

if TYPE_CHECKING:
    from trikafka.sim.world import SimResult

# world -> (the module whose parse_faults reads --faults, its planted bugs, its default --duration-s):
# the cluster (trikafka.sim.world), the shipped Kafka brokers and client (trikafka.sim.kafka_world)
WORLDS = {"cluster": ("trikafka.sim.faults", PLANT_NAMES, 30.0),
          "kafka": ("trikafka.sim.kafka_faults", KAFKA_PLANT_NAMES, 60.0)}


def add_parser(commands) -> None:
    """Register ``sim`` on the ``trikafka`` subparsers."""
    sim = commands.add_parser(
        "sim",
        description="Runs three real brokers on a virtual clock (fake disks, fake ZooKeeper, in-memory network) "
                    "with an acks -1 producer, a consumer, a consumer group and seeded faults, then checks "
                    "that acknowledged writes survive, replicas agree, one leader leads each epoch, no consumer "
                    "saw a message that vanished, group members never overlap, read in offset order and only "
                    "commit forward.  The same seed replays the same run: its trace hash is printed.")
    which = sim.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, metavar="N", help="run one seed")
    which.add_argument("--seeds", metavar="A..B", help="run every seed from A to B (inclusive)")
    sim.add_argument("--world", default="cluster", metavar="WORLD",
                     help="cluster (default): brokers, clients and a 0.7 group under faults; kafka: three real "
                          "brokers' Kafka listeners and trikafka's Kafka client (idempotent producers, transactional "
                          "copiers, a group, a read_committed reader) under faults")
    sim.add_argument("--duration-s", type=float, default=None, metavar="S",
                     help="simulated seconds of load and faults before healing (default 30; kafka 60)")
    sim.add_argument("--faults", default=None, metavar="LIST",
                     help=f"comma-separated fault names (default: all of the world's; cluster: {', '.join(FAULTS)})")
    sim.add_argument("--plant", default=None, metavar="BUG",
                     help=f"run with a planted bug (cluster: {', '.join(PLANT_NAMES)}; kafka: "
                          f"{', '.join(KAFKA_PLANT_NAMES)}): "
                          f"the simulation should fail")
    sim.add_argument("--brokers", type=int, default=3, metavar="N",
                     help="brokers in the simulated cluster (default 3; every partition has 3 replicas)")
    sim.add_argument("--partitions", type=int, default=2, metavar="N",
                     help="partitions of the simulated topic (default 2)")
    sim.add_argument("--trace", action="store_true", help="print the whole event trace of a single seed")
    sim.set_defaults(func=cmd_sim, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.world not in WORLDS:
        parser.error(f"unknown world {args.world!r} (known: {', '.join(WORLDS)})")
    if args.seeds is not None:
        low, sep, high = args.seeds.partition("..")
        if not sep or not low.strip().isdigit() or not high.strip().isdigit() or int(low) > int(high):
            parser.error("--seeds takes A..B with whole numbers A <= B")
        args.seed_range = range(int(low), int(high) + 1)
    else:
        args.seed_range = range(args.seed, args.seed + 1)
    faults_module, plants, default_duration_s = WORLDS[args.world]
    try:
        parse_faults = importlib.import_module(faults_module).parse_faults
        args.fault_names = parse_faults(args.faults) if args.faults is not None else None
    except ValueError as exc:
        parser.error(str(exc))
    if args.plant is not None and args.plant not in plants:
        parser.error(f"unknown planted bug {args.plant!r} for the {args.world} world (known: {', '.join(plants)})")
    if args.duration_s is None:
        args.duration_s = default_duration_s
    if args.duration_s <= 0:
        parser.error("--duration-s must be > 0")
    if not 3 <= args.brokers <= 32 or not 1 <= args.partitions <= 1024:
        # (three replicas: acks -1 with min.insync.replicas=2 survives one power cut)
        parser.error("--brokers takes 3 to 32 and --partitions 1 to 1024")


class _Tally:
    """What a run of seeds has shown so far."""

    def __init__(self) -> None:
        self.ok: list[int] = []
        self.failed: list[int] = []
        self.simulated_s = 0.0

    def counts(self) -> str:
        return (f"{len(self.ok)} ok, {len(self.failed)} failed"
                f"{' (' + ', '.join(map(str, self.failed)) + ')' if self.failed else ''}")


def cmd_sim(args: argparse.Namespace) -> int:
    tally = _Tally()
    interrupted = False
    try:
        _run_seeds(args, tally)
    except* KeyboardInterrupt:  # also from inside a run's nurseries: a summary, not their traceback
        interrupted = True
    if interrupted:
        print(f"trikafka: interrupted after {len(tally.ok) + len(tally.failed)} seeds: {tally.counts()}",
              file=sys.stderr)
        return 130
    return 1 if tally.failed else 0


def _run_seeds(args: argparse.Namespace, tally: _Tally) -> None:
    from trikafka.sim import FAULTS, run_seed
    from trikafka.sim import kafka_world

    started = time.perf_counter()
    many = args.seeds is not None  # a range, even of one seed: progress lines and the summary
    for done, seed in enumerate(args.seed_range, 1):
        result: SimResult
        if args.world == "kafka":
            result = kafka_world.run_seed(seed, duration_s=args.duration_s,
                                          faults=args.fault_names or kafka_world.KAFKA_FAULTS, plant=args.plant)
        else:
            result = run_seed(seed, duration_s=args.duration_s, faults=args.fault_names or FAULTS,
                              plant=args.plant, brokers=args.brokers, partitions=args.partitions)
        tally.simulated_s += result.simulated_s
        if args.trace and len(args.seed_range) == 1:
            print("\n".join(result.trace_lines))
        if result.violation is None:
            tally.ok.append(seed)
            line = f"seed {seed}: ok trace {result.digest}"
        else:
            tally.failed.append(seed)
            print(result.report(), file=sys.stderr, flush=True)
            line = f"seed {seed}: FAILED ({result.violation.promise}) trace {result.digest}"
        if many:
            print(f"[{done}/{len(args.seed_range)}] {line}", flush=True)
        else:
            print(line)
    if many:
        wall_s = time.perf_counter() - started
        print(f"seeds {args.seed_range.start}..{args.seed_range.stop - 1}: {tally.counts()}; "
              f"{tally.simulated_s:.0f} simulated s in {wall_s:.1f} wall s "
              f"({tally.simulated_s / max(wall_s, 1e-9):.0f}x)")
