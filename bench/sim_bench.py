"""How fast the deterministic simulation runs: simulated seconds per wall second.

Usage: python bench/sim_bench.py [--seeds N] [--duration-s S] [--shapes 3x2,3x8,5x2,5x8,3x32]

Prints two tables: for each fault mix on the default world (3 brokers, 2
partitions), and for each world shape (brokers x partitions) under every
fault, the seeds run, simulated and wall seconds, the speed-up, and the
acknowledged sets and group deliveries per seed.
"""

from __future__ import annotations

import argparse
import time

from trikafka.sim import FAULTS, run_seed

HEADER = f"{'seeds':>5} {'simulated s':>12} {'wall s':>8} {'speed-up':>9} {'acked/seed':>11} {'group/seed':>11}"


def measure(seeds: int, duration_s: float, **kwargs) -> str:
    started = time.perf_counter()
    simulated = acked = delivered = 0.0
    for seed in range(1, seeds + 1):
        result = run_seed(seed, duration_s=duration_s, **kwargs)
        simulated += result.simulated_s
        acked += result.acked
        delivered += result.delivered
    wall = time.perf_counter() - started
    return (f"{seeds:>5} {simulated:>12.0f} {wall:>8.1f} {simulated / wall:>8.0f}x "
            f"{acked / seeds:>11.0f} {delivered / seeds:>11.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--shapes", default="3x2,3x8,5x2,5x8,3x32", help="brokers x partitions, comma-separated")
    args = parser.parse_args()
    print(f"{'faults (3 brokers, 2 partitions)':<34} {HEADER}")
    for faults in (FAULTS, ("restart",), ("stall",), ()):
        name = "all faults" if faults == FAULTS else ",".join(faults) if faults else "expire only (lightest)"
        print(f"{name:<34} {measure(args.seeds, args.duration_s, faults=faults or ('expire',))}", flush=True)
    print()
    print(f"{'shape (all faults)':<34} {HEADER}")
    for shape in args.shapes.split(","):
        brokers, partitions = (int(n) for n in shape.split("x"))
        print(f"{f'{brokers} brokers x {partitions} partitions':<34} "
              f"{measure(args.seeds, args.duration_s, brokers=brokers, partitions=partitions)}", flush=True)


if __name__ == "__main__":
    main()
