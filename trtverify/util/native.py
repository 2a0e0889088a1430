"""Native crashes contained: what the run is doing in native code, told to the process that supervises it.

A command that runs stages (`run`, `layerwise`, `repair`, `convert`) works in a child process
(cli/supervise.py); its parent only waits. Before each native operation that can crash the process (an ONNX
Runtime session made or run, a PyTorch forward, a TensorRT build) the worker writes what it is about to do
into memory it shares with the parent: the stage and plan it is in, the operation, a key naming it, and the
workaround. When the worker dies of a signal (SIGSEGV, SIGABRT, the out-of-memory killer's SIGKILL), the
parent reads that record and starts a fresh worker told of the crash (`Resume`): the stages already written
to results.json are kept, the operation that crashed raises `NativeCrash` (a BackendError: exit 1 for a model
under test) instead of being tried again, and the run goes on.

The record is a JSON document in an anonymous shared mapping, rewritten in place (a few microseconds); a
process that is not supervised keeps it in memory only.
"""

from __future__ import annotations

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

SIZE = 1 << 16  # the shared record: a header (length) and the JSON, truncated to fit
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

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_record(cls, signum: int, record: dict[str, Any]) -> Crash:
        """The crash of a worker that died of `signum`, its last record read: the innermost operation of the
        thread that was in one (any thread's, when several were)."""
        ops = [op for stack in (record.get("ops") or {}).values() for op in stack[-1:]]
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


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.channel: mmap.mmap | None = None
        self.resume = Resume()
        self.record: dict[str, Any] = {"stage": None, "ops": {}, "results": None, "lock": None}

    def publish(self) -> None:
        if self.channel is None:
            return
        data = json.dumps(self.record, default=str).encode("utf-8")[: SIZE - _HEADER.size]
        self.channel[_HEADER.size : _HEADER.size + len(data)] = data
        self.channel[: _HEADER.size] = _HEADER.pack(len(data))


_STATE = _State()


def channel() -> mmap.mmap:
    """A new shared record, for a worker about to be forked (MAP_SHARED|MAP_ANONYMOUS survives fork)."""
    return mmap.mmap(-1, SIZE)


def read(shared: mmap.mmap) -> dict[str, Any]:
    """The record a dead worker left ({} when none, or torn)."""
    (n,) = _HEADER.unpack(shared[: _HEADER.size])
    if not 0 < n <= SIZE - _HEADER.size:
        return {}
    try:
        value = json.loads(bytes(shared[_HEADER.size : _HEADER.size + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def attach(shared: mmap.mmap | None, resume: Resume) -> None:
    """In a fresh worker: write the record to `shared`, and honour what `resume` says of earlier crashes."""
    _STATE.channel = shared
    _STATE.resume = resume
    _STATE.record = {"stage": None, "ops": {}, "results": None, "lock": None}
    if shared is not None:
        shared[: _HEADER.size] = _HEADER.pack(0)
    _STATE.publish()


def resume() -> Resume:
    return _STATE.resume


def supervised() -> bool:
    return _STATE.channel is not None


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


@contextmanager
def operation(
    what: str, *, key: str | None = None, hint: str | None = None, model: str | None = None
) -> Iterator[None]:
    """Around a native call that can crash the process: `what` it does ('creating an ONNX Runtime session for
    m.onnx at graph_optimization_level all'), a `key` naming it across processes, the workaround. Raises
    NativeCrash, without calling, where that key crashed a worker earlier in this run."""
    if key is not None:
        crash = _STATE.resume.poisoned.get(key)
        if crash is not None:
            raise NativeCrash(crash.error())
    tid = str(threading.get_ident())
    entry = {"what": what, "key": key, "hint": hint, "model": model}
    with _STATE.lock:
        _STATE.record["ops"].setdefault(tid, []).append(entry)
        _STATE.publish()
    try:
        yield
    finally:
        with _STATE.lock:
            stack = _STATE.record["ops"].get(tid, [])
            if stack:
                stack.pop()
            if not stack:
                _STATE.record["ops"].pop(tid, None)
            _STATE.publish()
