"""Atomic writes: the file appears whole or not at all, with the permissions of a normal file; the JSON they write."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from trtverify.util.fsutil import atomic_write, atomic_write_text, to_json


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


def test_json_lists_of_numbers_take_one_line_and_everything_else_one_item_a_line():
    value = {
        "shape": [1, 3, 224, 224],
        "confusion": [[5, 0], [1, 7]],
        "values": [0.5, -1e-07, math.nan, math.inf, -math.inf, None, True, np.float32(0.25), np.int64(3)],
        "names": ["a", "b"],
        "notes": ["x, [y]", "nan"],  # a list with strings stays one a line: a note's text is long
        "rows": [{"tensor": "t", "errors": []}],
        "empty": {},
        "text": "[\n1,\n2\n]",
        "path": Path("/data/x.npz"),
    }
    text = to_json(value)
    assert '"shape": [1, 3, 224, 224],\n' in text
    assert '"confusion": [\n    [5, 0],\n    [1, 7]\n  ],' in text
    assert '"values": [0.5, -1e-07, "nan", "inf", "-inf", null, true, 0.25, 3],' in text
    assert '"names": [\n    "a",\n    "b"\n  ],' in text and '"errors": []\n' in text and '"empty": {},' in text
    # the same data as plain indented JSON (non-finite numbers as strings)
    plain = json.dumps(value | {"path": "/data/x.npz"}, indent=2, default=lambda v: v.item())
    plain = plain.replace("NaN", '"nan"').replace("-Infinity", '"-inf"').replace("Infinity", '"inf"')
    assert json.loads(text) == json.loads(plain)
    assert to_json(list(range(1000))).count("\n") == 1
    with pytest.raises(TypeError):
        to_json({"x": {1, 2}})
