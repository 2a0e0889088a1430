"""Atomic file writes, the lock of an output folder, and hashing."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from trtverify.util import native
from trtverify.util.errors import EXIT_USAGE, TrtVerifyError

LOCK_NAME = ".trtverify.lock"


class WriteError(TrtVerifyError):
    """A file could not be written (full disk, read-only or missing folder): exit 2, the old file kept."""

    exit_code = EXIT_USAGE


_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK  # what open() makes a new file: the mode of files written through a temporary one


class FileTooLarge(ValueError):
    """A file larger than its reader's cap (read_capped)."""


def read_capped(path: Path, limit: int) -> bytes:
    """A file's bytes, at most `limit` of them: FileTooLarge beyond that, OSError (FileNotFoundError,
    IsADirectoryError, ...) as open raises it. Reads one byte past the cap rather than trusting the size on disk,
    so a FIFO or /dev/zero ends too."""
    with open(path, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise FileTooLarge(f"{path}: larger than {limit} bytes")
    return raw


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through a temporary file in the same folder, fsync, then rename over `path`.

    A crash at any point leaves either the old file or the new one, never a partial file. An OSError
    (a full disk, a folder that cannot be written) is raised as WriteError, which says the old file was kept.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; results and reports are for sharing (CI artifacts)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            kept = "the previous file is unchanged" if path.exists() else "nothing was written"
            raise WriteError(f"cannot write {path}: {exc.strerror or exc} ({kept})") from exc
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


_NONFINITE = ("nan", "inf", "-inf")  # how JSON, which has no NaN or Infinity, holds them here
_compact = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode  # C speed, finite numbers only


def _scalar(value: Any) -> str:
    """One JSON value that is not a container; non-finite floats as the strings 'nan', 'inf', '-inf'."""
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, str):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and (value != value or value in (math.inf, -math.inf)):
        return '"nan"' if value != value else ('"inf"' if value > 0 else '"-inf"')
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value, allow_nan=False)


def _is_number(value: Any) -> bool:
    """A number, boolean or null (numpy scalars too), or a non-finite number's string."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return value in _NONFINITE
    return hasattr(value, "item") and not isinstance(value, (dict, list, tuple))


def _encode(value: Any, pad: str, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = pad + "  "
        sep = "{\n"
        for k, v in value.items():
            out.append(f"{sep}{inner}{json.dumps(str(k))}: ")
            _encode(v, inner, out)
            sep = ",\n"
        out.append(f"\n{pad}}}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
        elif all(_is_number(v) for v in value):  # a shape, histogram counts, a confusion matrix's row: one line
            try:
                out.append(_compact(value))
            except (TypeError, ValueError):  # numpy scalars, NaN or infinities among them
                out.append("[" + ", ".join(_scalar(v) for v in value) + "]")
        else:
            inner = pad + "  "
            sep = "[\n"
            for v in value:
                out.append(sep + inner)
                _encode(v, inner, out)
                sep = ",\n"
            out.append(f"\n{pad}]")
    else:
        out.append(_scalar(value))


def to_json(value: Any) -> str:
    """Indented JSON (2 spaces), each list of numbers on one line: a list of 1,000 numbers takes one line, not
    1,000. Lists of strings or objects keep one item a line. JSON has no NaN or Infinity: they are written as the
    strings "nan", "inf" and "-inf"."""
    out: list[str] = []
    _encode(value, "", out)
    out.append("\n")
    return "".join(out)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, to_json(value))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def writable_folder(folder: Path, what: str = "--out") -> Path:
    """Create `folder` if needed and prove a file can be made in it; UsageError (exit 2) if not."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".trtverify-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)) or exc.errno in (errno.EEXIST, errno.ENOTDIR):
            why = "a file (not a folder) is in the way"
        raise WriteError(f"{what} {folder}: cannot write there: {why}") from exc
    return folder


HELD_LOCKS: set[Path] = set()  # the run locks this process holds (released by a hard exit too: release_held_locks)


def release_lock(lock: Path, pid: int) -> None:
    """Delete the run lock `lock` if process `pid` holds it (a supervising parent: its dead worker's)."""
    try:
        if lock.read_text(encoding="ascii").strip() == str(pid):
            lock.unlink()
    except OSError:
        pass


def _release(lock: Path) -> None:
    """Delete `lock` if this process holds it."""
    release_lock(lock, os.getpid())
    HELD_LOCKS.discard(lock)


def release_held_locks() -> None:
    """Delete every run lock this process holds: for an exit that skips the `finally` blocks (os._exit)."""
    for lock in list(HELD_LOCKS):
        _release(lock)


@contextmanager
def folder_lock(folder: Path, what: str = "--out") -> Iterator[Path]:
    """Hold FOLDER/.trtverify.lock (created with O_EXCL, holding our pid) for the body.

    Another live process holding it is a UsageError (exit 2) naming the folder and its pid; a lock
    left by a process that is gone (killed) is taken over. Released (deleted) when the body ends.
    """
    folder = writable_folder(folder, what)
    lock = folder / LOCK_NAME
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                text = lock.read_text(encoding="ascii", errors="replace").strip()
            except FileNotFoundError:
                continue  # released meanwhile: try again
            if text.isdigit() and int(text) != os.getpid() and pid_alive(int(text)):
                raise TrtVerifyError(
                    f"{what} {folder}: another trtverify run (pid {text}) is writing there; wait for it to end "
                    f"or choose another folder (if no such run exists, delete {lock})"
                ) from None
            try:  # stale: its process is gone (killed), or the file was never filled in
                lock.unlink()
            except FileNotFoundError:
                pass
            continue
        except OSError as exc:
            raise WriteError(f"{what} {folder}: cannot write there: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(f"{os.getpid()}\n")
        break
    else:
        raise TrtVerifyError(f"{what} {folder}: could not take the lock {lock}; another run keeps taking it")
    HELD_LOCKS.add(lock)
    native.note("lock", str(lock.absolute()))  # a supervising parent removes it if this process dies of a signal
    try:
        yield folder
    finally:
        _release(lock)
        native.note("lock", None)


def user_cache_dir(sub: str) -> Path | None:
    """This user's private cache folder for `sub`, made if missing: $TRTVERIFY_CACHE_DIR, else
    $XDG_CACHE_HOME/trtverify, else ~/.cache/trtverify. None (run without a cache) where it cannot be made, where
    no absolute home is known (HOME unset, a relative XDG_CACHE_HOME: ignored, as the XDG spec says), or where
    the folder or any folder above it could be changed by another user: what it holds is loaded as code.
    TRTVERIFY_CACHE_DIR set to an empty value turns caching off."""
    root = os.environ.get("TRTVERIFY_CACHE_DIR")
    if root is not None:
        if not root:
            return None
        base = Path(root).absolute()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        home = os.path.expanduser("~")
        if os.path.isabs(xdg):
            base = Path(xdg) / "trtverify"
        elif os.path.isabs(home):
            base = Path(home) / ".cache" / "trtverify"
        else:
            return None  # never a './~' folder in the working directory
    path = base / sub
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path if _private(path) else None
    except OSError:
        return None


def _private(path: Path) -> bool:
    """`path` is this user's and no other user can write it, nor swap it through a folder above it (each is
    this user's or root's, and not writable by others unless sticky, as /tmp is)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # no POSIX owners (Windows): the user's profile folder is private by default
        return True
    uid = getuid()
    st = path.stat()
    if st.st_uid != uid or st.st_mode & 0o022:
        return False
    for parent in path.resolve().parents:
        st = parent.stat()
        if st.st_uid not in (uid, 0) or (st.st_mode & 0o002 and not st.st_mode & 0o1000):
            return False
    return True
