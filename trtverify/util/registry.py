"""One registry mechanism: each entry names a 'module:attribute' target, imported on first use.

Backends, tasks and stages are registered this way (their entries live in
`trtverify.config.registry`, beside the suite schema that refers to them by name), so that
validating a suite never imports torch, TensorRT or ONNX Runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trtverify.util.errors import UsageError, unknown


@dataclass(frozen=True)
class Entry:
    """A registered name and the 'module:attribute' it resolves to."""

    name: str
    target: str

    def load(self) -> Any:
        module, attr = self.target.split(":")
        return getattr(importlib.import_module(module), attr)


E = TypeVar("E", bound=Entry)


class Registry(Generic[E]):
    """Entries by name, in registration order; an unknown name gets a 'did you mean'."""

    def __init__(self, what: str, entries: Iterable[E]):
        self.what = what
        self._entries = {e.name: e for e in entries}

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[E]:
        return list(self._entries.values())

    def get(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise UsageError(unknown(self.what, name, self.names())) from None

    def load(self, name: str) -> Any:
        return self.get(name).load()
