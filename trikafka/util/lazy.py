"""A package's re-exported names, each imported from its module on first use (PEP 562).

trikafka's packages re-export their public names.  ``lazy_exports`` keeps
importing a package cheap, so that a process that needs one light module of
it (a Spark planner reading ``trikafka.zk.paths``) does not pay for the heavy
ones (Trio, kazoo).  It lives in ``util`` because every layer may import
``util``; it does no I/O and imports only the standard library.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``: ``exports`` maps a module (relative to the
    package, or absolute) to the names it re-exports; a name is imported on first use and
    then kept in the package like an ordinary import."""
    module_of = {name: module for module, names in exports.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(import_module(module_of[name], package), name)
        return value

    return sorted(module_of), __getattr__
