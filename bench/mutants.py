"""A small mutation sampler: do the tests notice when one operator or constant changes?

Run from the repository root, e.g.::

    python bench/mutants.py --modules trikafka/log --tests 'tests/unit/test_log_*' \\
        'tests/property/test_log_*' -n 60 --seed 1 --hypothesis-examples 30

It lists every mutation site of the chosen kinds in the given modules (stdlib
``ast``), draws ``-n`` of them with ``--seed``, and for each one: writes the
mutated module into a temporary copy of the project, runs the pytest
selection there with ``-x -q``, and prints ``killed`` (a test failed or the
run exceeded its time limit) or ``survived``, with ``file:line`` and the
mutation.  The working tree is never written: every mutant lives in the
temporary copy, which is deleted at the end, on an error and on Ctrl-C.

Kinds (``--kinds``, default all):

* ``compare``: ``<`` and ``<=``, ``>`` and ``>=`` swap; ``==``/``!=``,
  ``is``/``is not``, ``in``/``not in`` negate;
* ``arith``: ``+``/``-``, ``*`` to ``//``, ``//`` and ``/`` to ``*``, ``%`` to
  ``//``, ``|``/``&``, ``^`` to ``|``, ``<<``/``>>`` (also in ``x op= y``);
* ``bool``: ``and``/``or`` swap, ``not x`` becomes ``x``, ``True``/``False`` swap;
* ``const``: an integer literal plus or minus one.

Assertions, docstrings and f-strings are left alone (a mutated invariant
check, or message, says nothing about the tests).  ``--hypothesis-examples N``
runs Hypothesis tests, state machines included, at ``N`` examples each,
derandomized, so that a run is repeatable.  The figures printed at the end are
raw: which survivors are equivalent mutants (no test could tell them apart)
is a judgement the reader makes from the list.
"""

from __future__ import annotations

import argparse
import ast
import glob
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

KINDS = ("compare", "arith", "bool", "const")

COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
ARITH_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv, ast.BitOr: ast.BitAnd, ast.BitAnd: ast.BitOr, ast.BitXor: ast.BitOr,
    ast.LShift: ast.RShift, ast.RShift: ast.LShift,
}
# Where the project's own files stand in the temporary copy (the tests import them from there).
COPIED = ("trikafka", "tests", "docs", "pyspark_trikafka", "pyproject.toml")
PLUGIN_EXAMPLES_ENV = "MUTANTS_HYPOTHESIS_EXAMPLES"


@dataclass(frozen=True)
class Mutant:
    """One mutation: the source span ``[start, end)`` of ``path`` (line/column pairs) becomes ``replacement``."""

    path: str
    kind: str
    line: int
    col: int
    end_line: int
    end_col: int
    original: str
    replacement: str

    def label(self) -> str:
        return f"{self.path}:{self.line}:{self.col + 1}  [{self.kind}]  {self.original!r} -> {self.replacement!r}"


# -- finding the sites ---------------------------------------------------------------------


def _skipped_spans(tree: ast.Module) -> set[int]:
    """ids of nodes under an assert, a docstring, an f-string or an annotation: no mutant is made there."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST] = []
        if isinstance(node, (ast.Assert, ast.JoinedStr)):
            roots.append(node)
        if isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation is not None:
            roots.append(node.annotation)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                roots.append(first)
        for root in roots:
            skipped.update(id(n) for n in ast.walk(root))
    return skipped


def _expr(node: ast.expr) -> str:
    return f"({ast.unparse(node)})"


def _node_mutations(node: ast.AST) -> Iterator[tuple[str, ast.expr | ast.stmt, str]]:
    """(kind, the node whose span is replaced, its replacement text) for one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swap = COMPARE_SWAPS.get(type(op))
            if swap is not None:
                ops = list(node.ops)
                ops[i] = swap()
                yield "compare", node, _expr(ast.Compare(node.left, ops, node.comparators))
    elif isinstance(node, ast.BinOp) and type(node.op) in ARITH_SWAPS:
        yield "arith", node, _expr(ast.BinOp(node.left, ARITH_SWAPS[type(node.op)](), node.right))
    elif isinstance(node, ast.AugAssign) and type(node.op) in ARITH_SWAPS:
        yield "arith", node, ast.unparse(ast.AugAssign(node.target, ARITH_SWAPS[type(node.op)](), node.value))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "bool", node, _expr(ast.BoolOp(other, node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "bool", node, _expr(node.operand)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "bool", node, repr(not node.value)
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        yield "const", node, repr(node.value + 1)
        yield "const", node, repr(node.value - 1)


def find_mutants(path: str, source: str, kinds: tuple[str, ...]) -> list[Mutant]:
    """Every mutation of the given kinds in one module, in source order."""
    tree = ast.parse(source, path)
    skipped = _skipped_spans(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        for kind, span, replacement in _node_mutations(node):
            if kind not in kinds:
                continue
            assert span.end_lineno is not None and span.end_col_offset is not None, span
            original = ast.get_source_segment(source, span) or ""
            found.append(Mutant(path, kind, span.lineno, span.col_offset, span.end_lineno,
                                span.end_col_offset, " ".join(original.split()), replacement))
    return sorted(found, key=lambda m: (m.line, m.col, m.replacement))


def apply(source: str, mutant: Mutant) -> str:
    """``source`` with the mutant's span replaced (everything else byte for byte the same)."""
    lines = source.splitlines(keepends=True)

    def offset(line: int, col: int) -> int:  # ast columns are UTF-8 byte offsets
        return sum(len(s) for s in lines[:line - 1]) + len(lines[line - 1].encode()[:col].decode())

    start, end = offset(mutant.line, mutant.col), offset(mutant.end_line, mutant.end_col)
    mutated = source[:start] + mutant.replacement + source[end:]
    ast.parse(mutated)  # a mutant that does not compile is a bug here, not a kill
    return mutated


def module_paths(specs: list[str]) -> list[str]:
    """The ``.py`` files named or under the directories named, sorted."""
    paths: set[str] = set()
    for spec in specs:
        if os.path.isdir(spec):
            paths.update(glob.glob(os.path.join(spec, "**", "*.py"), recursive=True))
        else:
            paths.update(glob.glob(spec))
    return sorted(os.path.normpath(p) for p in paths)


# -- running the tests -----------------------------------------------------------------------


def copy_project(root: str, into: str) -> None:
    """Copy what the tests need into ``into``, without byte-code caches or Hypothesis databases."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in COPIED:
        source = os.path.join(root, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(into, name), ignore=ignore)
        elif os.path.exists(source):
            shutil.copy2(source, os.path.join(into, name))


def write_module(path: str, source: str) -> None:
    """Write ``source`` to ``path`` and drop its cached byte code: a mutant of the same size,
    written in the same second, would otherwise pass for the cached module."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    try:
        os.remove(importlib.util.cache_from_source(path))
    except FileNotFoundError:
        pass


def run_tests(workdir: str, tests: list[str], hypothesis_examples: int | None, timeout_s: float) -> tuple[bool, float]:
    """Run the selection in ``workdir``; (passed, seconds).  A run past ``timeout_s`` counts as failed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([workdir, os.path.dirname(os.path.abspath(__file__))]))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", "--no-header", "-p", "mutants"]
    if hypothesis_examples is not None:
        env[PLUGIN_EXAMPLES_ENV] = str(hypothesis_examples)
    patterns = [p for t in tests for p in (sorted(glob.glob(os.path.join(workdir, t))) or [t])]
    started = time.monotonic()
    process = subprocess.Popen(command + patterns, cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = -1
    finally:
        if process.poll() is None:  # a timeout or Ctrl-C: stop the run and whatever it started
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return code == 0, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", required=True, help="modules or package directories to mutate")
    parser.add_argument("--tests", nargs="+", required=True, help="pytest paths (globs allowed) to run per mutant")
    parser.add_argument("-n", type=int, default=40, help="how many mutants to sample (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--hypothesis-examples", type=int, default=None,
                        help="run every Hypothesis test at this many examples, derandomized")
    parser.add_argument("--timeout-factor", type=float, default=5.0,
                        help="a mutant's run may take this many times the clean run (else it counts as killed)")
    parser.add_argument("--pick", type=lambda s: [int(i) for i in s.split(",")], default=None,
                        help="run only these numbers of the sample (1-based, comma-separated): a rerun of survivors")
    parser.add_argument("--at", nargs="+", default=None, metavar="PATH:LINE",
                        help="instead of a sample, every mutation on these lines (a check of named holes)")
    parser.add_argument("--list", action="store_true", help="print every site and exit")
    args = parser.parse_args(argv)

    root = os.getcwd()
    candidates = []
    for path in module_paths(args.modules):
        with open(path, encoding="utf-8") as f:
            candidates.extend(find_mutants(path, f.read(), tuple(args.kinds)))
    if args.list:
        for mutant in candidates:
            print(mutant.label())
        print(f"{len(candidates)} sites")
        return 0
    if args.at is not None:
        sample = [m for m in candidates if f"{m.path}:{m.line}" in args.at]
    else:
        sample = random.Random(args.seed).sample(candidates, min(args.n, len(candidates)))
    chosen = f"every one on {len(args.at)} lines" if args.at is not None else f"sampling (seed {args.seed})"
    print(f"{len(candidates)} mutation sites in {len(module_paths(args.modules))} modules; {len(sample)} mutants, "
          f"{chosen}, kinds {' '.join(args.kinds)}", flush=True)
    numbered = [(i, m) for i, m in enumerate(sample, 1) if args.pick is None or i in args.pick]

    killed: list[Mutant] = []
    survived: list[Mutant] = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as workdir:
        copy_project(root, workdir)
        passed, clean_s = run_tests(workdir, args.tests, args.hypothesis_examples, timeout_s=3600)
        if not passed:
            print("the selection fails without any mutant: nothing to measure", file=sys.stderr)
            return 2
        timeout_s = max(10.0, args.timeout_factor * clean_s)
        print(f"clean run: {clean_s:.1f} s; a mutant's run is stopped after {timeout_s:.0f} s", flush=True)
        for i, mutant in numbered:
            target = os.path.join(workdir, mutant.path)
            with open(target, encoding="utf-8") as f:
                pristine = f.read()
            try:
                write_module(target, apply(pristine, mutant))
                passed, seconds = run_tests(workdir, args.tests, args.hypothesis_examples, timeout_s)
            finally:
                write_module(target, pristine)
            (survived if passed else killed).append(mutant)
            verdict = "survived" if passed else ("killed (timeout)" if seconds >= timeout_s else "killed")
            print(f"{i:3}/{len(sample)} {verdict:17} {mutant.label()}", flush=True)

    total = len(killed) + len(survived)
    print(f"\nkilled {len(killed)} of {total} ({100 * len(killed) / max(total, 1):.0f}%), survived {len(survived)}:")
    for mutant in survived:
        print(f"  {mutant.label()}")
    return 0


# -- the pytest plugin the runs load (``-p mutants``) -------------------------------------


def pytest_configure(config: object) -> None:
    """Under ``--hypothesis-examples``: a small, derandomized profile for every Hypothesis test."""
    examples = os.environ.get(PLUGIN_EXAMPLES_ENV)
    if examples is None:
        return
    from hypothesis import HealthCheck, settings

    settings.register_profile("mutants", max_examples=int(examples), deadline=None, derandomize=True,
                              database=None, suppress_health_check=list(HealthCheck))
    settings.load_profile("mutants")


def pytest_collection_modifyitems(items: list[object]) -> None:
    """State machines carry their own settings: cut those to the same number of examples."""
    examples = os.environ.get(PLUGIN_EXAMPLES_ENV)
    if examples is None:
        return
    from hypothesis import settings

    for item in items:
        cls = getattr(item, "cls", None)
        own = getattr(cls, "settings", None)
        if isinstance(own, settings):
            setattr(cls, "settings", settings(own, max_examples=int(examples), derandomize=True, database=None))


if __name__ == "__main__":
    sys.exit(main())
