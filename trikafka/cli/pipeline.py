"""``trikafka pipeline``: the page-view pipeline on Spark (``python -m trikafka.spark.pipeline``)."""

from __future__ import annotations

import argparse
from typing import Sequence


def add_parser(commands) -> None:
    """Register ``pipeline`` on the ``trikafka`` subparsers (its own parser owns every option)."""
    pipeline = commands.add_parser("pipeline", add_help=False)
    pipeline.add_argument("pipeline_args", nargs=argparse.REMAINDER)
    pipeline.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace | Sequence[str]) -> int:
    """``trikafka pipeline ...`` is ``python -m trikafka.spark.pipeline ...``."""
    from trikafka.spark.pipeline import main as pipeline_main

    rest = args.pipeline_args if isinstance(args, argparse.Namespace) else list(args)
    return pipeline_main(rest)
