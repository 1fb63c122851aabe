"""Exceptions out of Trio's nurseries: the leaves a person should read, not the groups around them."""

from __future__ import annotations


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """Every exception inside (nested) exception groups, in order, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]
