"""Old module paths of moved modules, kept for one release: importing one warns (DeprecationWarning)
and hands over the module at its new path, the same object, so attributes set on either are seen by
both. Each old path is a short module that calls `moved` (or `warn_moved`, where its names went to
two modules)."""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType


def warn_moved(old: str, new: str, stacklevel: int = 2) -> None:
    """The DeprecationWarning of an import of `old`; `stacklevel` as the caller would give warnings.warn
    (2, from a shim's top level: the line that imported it)."""
    message = f"{old} moved to {new}; the old path works until the next release"
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def moved(old: str, new: str, name: str) -> ModuleType:
    """The module `new`, registered in place of the shim module `name` (the shim's __name__) whose
    path was `old`; run as a script (`python -m old`), the shim stays __main__ and runs the new one, and
    the warning points at the shim, so that Python shows it."""
    warn_moved(old, new, 2 if name == "__main__" else 3)
    module = importlib.import_module(new)
    if name != "__main__":
        sys.modules[name] = module
    return module
