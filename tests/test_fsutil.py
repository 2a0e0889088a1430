"""Atomic writes: the file appears whole or not at all, with the permissions of a normal file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trtverify.util.fsutil import atomic_write, atomic_write_text


def test_written_files_get_the_umask_permissions_not_mkstemps_0600(tmp_path: Path):
    from trtverify.util import fsutil

    atomic_write_text(tmp_path / "report.html", "<html></html>")
    # CI artifact servers and colleagues must be able to read the report: what open() would give
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o666 & ~fsutil._UMASK
    assert fsutil._UMASK == _current_umask()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old")

    def boom(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_read_capped_reads_at_most_its_limit(tmp_path):
    """The one bounded reader the suite, build-log, COCO, results and baseline readers share: a file of exactly the
    limit reads; one byte more is FileTooLarge; /dev/zero (no end) stops at the cap."""
    from trtverify.util.fsutil import FileTooLarge, read_capped

    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert read_capped(f, 10) == b"x" * 10
    with pytest.raises(FileTooLarge):
        read_capped(f, 9)
    with pytest.raises(FileTooLarge):
        read_capped(Path("/dev/zero"), 1 << 16)
