"""The commands that run models work in a child process, so that a native crash (ONNX Runtime, PyTorch, TensorRT
or a user's hook dying of SIGSEGV or SIGABRT, or the out-of-memory killer) ends one stage, never the run.

The parent forks before anything heavy is imported (about 15 MB), forwards SIGINT, SIGTERM and SIGHUP to the
worker (which sits in its own process group, so a terminal's Ctrl-C reaches it once, through the parent), and
waits. A worker that exits gives its exit code. A worker that dies of a signal left a record of what it was
doing (util/native.py): the parent prints it and forks a fresh worker that keeps the stages already in
results.json, does not try the operation that crashed again (it becomes that model's error, exit 1) or, where no
operation is named, records the stage as crashed, and runs the rest. The run lock a dead worker held is removed.

Not on platforms without fork (Windows) or where TRTVERIFY_SUPERVISE=0 (a debugger, a `breakpoint()` in a hook):
there the command runs in one process, as before.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from trtverify.util import native

COMMANDS = frozenset({"run", "layerwise", "repair", "convert", "reduce"})  # the commands that run or convert models
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_RESTARTS = 16  # each restart handles one more crash; a run that crashes more often than this stops


def wanted(argv: list[str]) -> bool:
    """Whether this command line runs in a supervised worker."""
    if os.environ.get("TRTVERIFY_SUPERVISE", "1") == "0" or not hasattr(os, "fork"):
        return False
    if not sys.platform.startswith("linux"):
        return False
    return command_of(argv) in COMMANDS and not {"-h", "--help"} & set(argv)


def supervise(argv: list[str]) -> None:
    """Fork the worker and return in it, SIGINT, SIGTERM and SIGHUP held until `release`; in the parent, wait,
    restart after crashes, and exit with the worker's code (never returns there)."""
    shared = native.channel()
    resume = native.Resume()
    child = 0
    forwarding: list[int] = []  # the signals sent on to the worker: it is stopping, not crashing

    def forward(signum: int, frame: Any) -> None:
        forwarding.append(signum)
        if child:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    kept = {s: signal.getsignal(s) for s in FORWARDED}
    for restarts in range(MAX_RESTARTS + 1):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # the signals wait while the worker sets its handlers and the parent its own: none falls in between
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        child = os.fork()
        if child == 0:
            _become_worker(shared, resume, kept)
            _held.append(mask)  # the worker lets them through where it can say what a stop leaves (`release`)
            return
        for s in FORWARDED:
            if kept[s] is not signal.SIG_IGN:  # a run started with SIGINT ignored (nohup, a background job) keeps it
                signal.signal(s, forward)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _, status = os.waitpid(child, 0)
        if os.WIFEXITED(status):
            _exit(os.WEXITSTATUS(status))
        signum = os.WTERMSIG(status)
        record = native.read(shared)
        if record.get("lock"):  # the run lock a dead worker held (it holds that worker's pid)
            from trtverify.util.fsutil import release_lock  # only now: the parent stays light

            release_lock(Path(record["lock"]), child)
        if forwarding:  # stopped by a signal sent to the run, not crashed
            _exit(128 + forwarding[0])
        crash = native.Crash.from_record(signum, record)
        going_on = restarts < MAX_RESTARTS and resume.add(crash, record.get("results"))
        _tell(crash, going_on)
        if not going_on:
            _exit(native.exit_code(crash))
    raise AssertionError("unreachable")


_held: list[Any] = []  # the worker's signal mask before the fork, while SIGINT, SIGTERM and SIGHUP wait


def release() -> None:
    """In the worker: let SIGINT, SIGTERM and SIGHUP through, which wait from the fork until the command can
    record a stop (`run`: cli/run.py stops_recorded; the others: as their command starts). Idempotent."""
    if _held:
        signal.pthread_sigmask(signal.SIG_SETMASK, _held.pop())


def command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _exit(code: int) -> None:
    """The parent's end: nothing of its own to clean up, so the interpreter's teardown (about 10 ms, after the
    worker's own) is skipped."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _become_worker(shared: Any, resume: native.Resume, kept: dict[int, Any]) -> None:
    for s, handler in kept.items():
        signal.signal(s, handler)
    os.setpgid(0, 0)  # its own process group: a terminal's Ctrl-C reaches it once, forwarded by the parent
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # may write to the terminal from a background process group
    _die_with_parent()
    native.attach(shared, resume)


def _die_with_parent() -> None:
    """SIGTERM to the worker when its parent dies (killed with SIGKILL, say), where Linux offers it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(143)


def _tell(crash: native.Crash, going_on: bool) -> None:
    line = f"trtverify: the worker process died of {crash.signal} ({crash.meaning}){crash.where()}"
    if going_on:
        what = "not trying that again" if crash.key else f"recording stage {crash.stage} as crashed"
        line += f"; {what}, the run goes on in a fresh process"
    else:
        line += "; the run cannot go on"
        if crash.hint:
            line += f". Workaround: {crash.hint}"
    print(line, file=sys.stderr, flush=True)
