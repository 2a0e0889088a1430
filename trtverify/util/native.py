"""Native crashes contained: what the run is doing in native code, told to the process that supervises it.

A command that runs stages (`run`, `layerwise`, `repair`, `convert`) works in a child process
(cli/supervise.py); its parent only waits. Before each native operation that can crash the process (an ONNX
Runtime session made or run, a PyTorch forward, a TensorRT build) the worker writes what it is about to do
into memory it shares with the parent: the stage and plan it is in, the operation, a key naming it, and the
workaround. When the worker dies of a signal (SIGSEGV, SIGABRT, the out-of-memory killer's SIGKILL), the
parent reads that record and starts a fresh worker told of the crash (`Resume`): the stages already written
to results.json are kept, the operation that crashed raises `NativeCrash` (a BackendError: exit 1 for a model
under test) instead of being tried again, and the run goes on.

The record lies in an anonymous shared mapping: the run's state as JSON, rewritten when it changes (a stage
begins, results.json or the lock is written), and one slot per thread holding the operation it is in, written
from bytes each `Operation` makes once (about a microsecond per call). A process that is not supervised writes
nothing.
"""

from __future__ import annotations

import itertools
import json
import mmap
import signal
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from trtverify.util.errors import EXIT_CHECK_FAILED, EXIT_INTERNAL, BackendError

_HEADER = struct.Struct("<Q")


class NativeCrash(BackendError):
    """An operation that crashed the process earlier in this run, not tried again (exit 1)."""


# what each fatal signal usually means, in a user's words
SIGNALS = {
    "SIGSEGV": "a segmentation fault",
    "SIGABRT": "an abort: a failed assertion or an uncaught C++ exception",
    "SIGBUS": "a bus error",
    "SIGFPE": "an arithmetic exception",
    "SIGILL": "an illegal instruction: a library built for another CPU",
    "SIGKILL": "killed, most often by the kernel's out-of-memory killer",
    "SIGTRAP": "a trap",
    "SIGSYS": "a bad system call",
}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class Crash:
    """One native crash of a worker, as its parent saw it."""

    signal: str  # 'SIGSEGV'
    what: str | None = None  # the operation it was in ('creating an ONNX Runtime 1.32.0 session for x.onnx ...')
    key: str | None = None  # names the operation for a rerun (None: not attributable)
    hint: str | None = None  # the workaround
    model: str | None = None  # the model it concerned
    stage: str | None = None  # the stage it was in, with its shape label in a sweep
    plan: int | None = None  # the index of that stage in the run plan

    @property
    def meaning(self) -> str:
        return SIGNALS.get(self.signal, "a native crash")

    def where(self) -> str:
        """' while creating ... in stage repair'."""
        text = f" while {self.what}" if self.what else ""
        return text + (f" in stage {self.stage}" if self.stage else "")

    def error(self) -> str:
        """The error recorded for what crashed."""
        text = f"native crash: the process died of {self.signal} ({self.meaning}){self.where()}; trtverify contained "
        text += "it and went on without it"
        return text + (f". Workaround: {self.hint}" if self.hint else "")

    @classmethod
    def from_record(cls, signum: int, record: dict[str, Any]) -> Crash:
        """The crash of a worker that died of `signum`, its last record read: the innermost operation of the
        thread that was in one (any thread's, when several were)."""
        ops = record.get("ops") or []  # the innermost operation of each thread in one, the latest last
        op = ops[-1] if ops else {}
        stage = record.get("stage") or {}
        label = stage.get("label")
        return cls(
            signal=signal_name(signum),
            what=op.get("what"),
            key=op.get("key"),
            hint=op.get("hint"),
            model=op.get("model"),
            stage=(f"{stage['name']} at {label}" if label else stage.get("name")) if stage else None,
            plan=stage.get("index") if stage else None,
        )


def exit_code(crash: Crash) -> int:
    """1 where the crash concerned a model under test (it cannot be loaded or run), 4 where nothing names what
    crashed."""
    return EXIT_CHECK_FAILED if crash.model or crash.key else EXIT_INTERNAL


@dataclass
class Resume:
    """What a fresh worker is told of the crashes before it: the operations not to try again (by key), the plans
    whose stage crashed where nothing can be skipped (recorded as crashed instead of run), and what its
    predecessor wrote to results.json (kept: the stages before the crash)."""

    crashes: list[Crash] = field(default_factory=list)
    poisoned: dict[str, Crash] = field(default_factory=dict)
    dead: dict[int, Crash] = field(default_factory=dict)
    results: dict[str, Any] | None = None  # {'path', 'started', 'done'}: the last results.json written

    def add(self, crash: Crash, results: dict[str, Any] | None) -> bool:
        """Take `crash` in; False when a fresh worker cannot get further (a crash outside any stage that names
        no operation, or one already handled)."""
        self.crashes.append(crash)
        self.results = results
        if crash.key is not None and crash.key not in self.poisoned:
            self.poisoned[crash.key] = crash  # the stage runs again; this operation fails instead of crashing
            return True
        if crash.plan is not None and crash.plan not in self.dead:
            self.dead[crash.plan] = crash  # nothing to skip inside it: the stage is recorded as crashed
            return True
        return False


_BASE = 16 << 10  # the shared record: the run's state (stage, results, lock) as JSON, then one slot per thread
_SLOT = 2 << 10  # a thread's innermost operation: sequence number, length, JSON
_SLOTS = 24
SIZE = _BASE + _SLOTS * _SLOT
_SLOT_HEAD = struct.Struct("<QI")


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.channel: mmap.mmap | None = None
        self.resume = Resume()
        self.record: dict[str, Any] = {"stage": None, "results": None, "lock": None}
        self.local = threading.local()  # per thread: its slot and its stack of operations
        self.slots = 0
        self.seq = itertools.count(1)

    def publish(self) -> None:
        if self.channel is None:
            return
        data = json.dumps(self.record, default=str).encode("utf-8")[: _BASE - _HEADER.size]
        self.channel[_HEADER.size : _HEADER.size + len(data)] = data
        self.channel[: _HEADER.size] = _HEADER.pack(len(data))

    def slot(self) -> tuple[int, list[Operation]]:
        local = self.local
        try:
            return local.offset, local.stack
        except AttributeError:
            with self.lock:
                local.offset = _BASE + (self.slots % _SLOTS) * _SLOT
                self.slots += 1
            local.stack = []
            return local.offset, local.stack

    def write(self, offset: int, data: bytes) -> None:
        ch = self.channel
        if ch is not None:
            ch[offset + _SLOT_HEAD.size : offset + _SLOT_HEAD.size + len(data)] = data
            ch[offset : offset + _SLOT_HEAD.size] = _SLOT_HEAD.pack(next(self.seq), len(data))


_STATE = _State()


class Operation:
    """A native call that can crash the process: `what` it does ('creating an ONNX Runtime 1.32.0 session for
    m.onnx at graph_optimization_level all'), a `key` naming it across processes, the workaround, the model it
    concerns. Made once and entered around each call (`with op:`): entering writes its prepared record into the
    thread's slot (about a microsecond), so a timed inference loop is not slowed; it raises NativeCrash, without
    the call, where that key crashed a worker earlier in this run."""

    __slots__ = ("key", "data")

    def __init__(self, what: str, *, key: str | None = None, hint: str | None = None, model: str | None = None):
        self.key = key
        entry = {"what": what, "key": key, "hint": hint, "model": model}
        self.data = json.dumps(entry).encode("utf-8")[: _SLOT - _SLOT_HEAD.size]

    def __enter__(self) -> Operation:
        if self.key is not None and self.key in _STATE.resume.poisoned:
            raise NativeCrash(_STATE.resume.poisoned[self.key].error())
        if _STATE.channel is not None:
            offset, stack = _STATE.slot()
            stack.append(self)
            _STATE.write(offset, self.data)
        return self

    def __exit__(self, *exc: object) -> None:
        if _STATE.channel is not None:
            offset, stack = _STATE.slot()
            if stack:
                stack.pop()
            _STATE.write(offset, stack[-1].data if stack else b"")


def channel() -> mmap.mmap:
    """A new shared record, for a worker about to be forked (MAP_SHARED|MAP_ANONYMOUS survives fork)."""
    return mmap.mmap(-1, SIZE)


def read(shared: mmap.mmap) -> dict[str, Any]:
    """The record a dead worker left: its state, and `ops` (the operations its threads were in, the most recently
    entered last); {} where nothing was written."""
    (n,) = _HEADER.unpack(shared[: _HEADER.size])
    value: Any = {}
    if 0 < n <= _BASE - _HEADER.size:
        try:
            value = json.loads(bytes(shared[_HEADER.size : _HEADER.size + n]).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            value = {}
    value = value if isinstance(value, dict) else {}
    ops = []
    for i in range(_SLOTS):
        offset = _BASE + i * _SLOT
        seq, length = _SLOT_HEAD.unpack(shared[offset : offset + _SLOT_HEAD.size])
        if not 0 < length <= _SLOT - _SLOT_HEAD.size:
            continue
        try:
            op = json.loads(bytes(shared[offset + _SLOT_HEAD.size : offset + _SLOT_HEAD.size + length]))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(op, dict):
            ops.append((seq, op))
    value["ops"] = [op for _, op in sorted(ops, key=lambda x: x[0])]
    return value


def attach(shared: mmap.mmap | None, resume: Resume) -> None:
    """In a fresh worker: write the record to `shared`, and honour what `resume` says of earlier crashes."""
    _STATE.channel = shared
    _STATE.resume = resume
    _STATE.record = {"stage": None, "results": None, "lock": None}
    _STATE.local = threading.local()
    _STATE.slots = 0
    if shared is not None:
        shared[:] = bytes(len(shared))
    _STATE.publish()


def resume() -> Resume:
    return _STATE.resume


def note(key: str, value: Any) -> None:
    """Record `value` under `key` ('lock': the run lock taken; 'results': the results.json last written)."""
    with _STATE.lock:
        _STATE.record[key] = value
        _STATE.publish()


@contextmanager
def stage(index: int, name: str, label: str | None) -> Iterator[None]:
    """The run is in plan `index` (stage `name`, at shape `label` in a sweep)."""
    note("stage", {"index": index, "name": name, "label": label})
    try:
        yield
    finally:
        note("stage", None)
