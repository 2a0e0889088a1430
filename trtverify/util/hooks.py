"""User code enters only through explicit `module:callable` strings."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trtverify.util.errors import UsageError

HOOK_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_hook_spec(spec: str) -> bool:
    return bool(HOOK_RE.match(spec))


@contextmanager
def extra_sys_path(paths: Sequence[Path]) -> Iterator[None]:
    added = [str(p) for p in paths if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)


def load_hook(spec: str, search_path: Sequence[Path] = (), what: str = "hook") -> Callable[..., Any]:
    """Resolve 'package.module:attr.sub' to a callable, with an error that says what to do."""
    if not is_hook_spec(spec):
        raise UsageError(f"{what} '{spec}' is not of the form 'module:callable'")
    module_name, attr_path = spec.split(":", 1)
    with extra_sys_path(search_path):
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and not module_name.startswith(exc.name):
                raise  # the module exists but imports something missing: let the caller map it
            where = ", ".join(str(p) for p in search_path) or "sys.path"
            raise UsageError(
                f"{what} '{spec}': module '{module_name}' not found (searched {where} and sys.path): {exc}"
            ) from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{what} '{spec}': '{module_name}' has no attribute '{attr_path}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{what} '{spec}' is not callable")
    return obj
