"""How fast the deterministic simulation runs: simulated seconds per wall second.

Usage: python bench/sim_bench.py [--seeds N] [--duration-s S]

Prints, for each fault mix, the seeds run, simulated and wall seconds, and the speed-up.
"""

from __future__ import annotations

import argparse
import time

from trikafka.sim import FAULTS, run_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=30.0)
    args = parser.parse_args()
    print(f"{'faults':<30} {'seeds':>5} {'simulated s':>12} {'wall s':>8} {'speed-up':>9} {'acked/seed':>11}")
    for faults in (FAULTS, ("restart",), ("stall",), ()):
        started = time.perf_counter()
        simulated = acked = 0.0
        for seed in range(1, args.seeds + 1):
            result = run_seed(seed, duration_s=args.duration_s, faults=faults or ("expire",))
            simulated += result.simulated_s
            acked += result.acked
        wall = time.perf_counter() - started
        name = "all faults" if faults == FAULTS else ",".join(faults) if faults else "expire only (lightest)"
        print(f"{name:<30} {args.seeds:>5} {simulated:>12.0f} {wall:>8.1f} {simulated / wall:>8.0f}x "
              f"{acked / args.seeds:>11.0f}")


if __name__ == "__main__":
    main()
