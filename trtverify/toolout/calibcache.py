"""TensorRT's INT8 calibration cache (TensorRT <= 10, text): what each tensor's dynamic range is.

The file IInt8Calibrator's `writeCalibrationCache` gives (Polygraphy's `Calibrator(cache=...)`, trtexec's
`--calib`): a header `TRT-<version>-<calibrator>` (`TRT-8601-EntropyCalibration2`, `TRT-100300-MinMaxCalibration`;
older caches and hand-written ones may lack it), then one `tensor name: <hex>` line per tensor, the hex being the
big-endian IEEE-754 float32 of the tensor's scale; its dynamic range is scale * 127. The names are the network's
tensor names: for a network parsed from ONNX, the ONNX tensor names (TensorRT's own tensors read
`(Unnamed Layer* 12) [Constant]_output` or `(Unnamed ITensor* 38)`).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from trtverify.util.errors import UsageError

HEADER = re.compile(r"^TRT-(?P<n>\d{4,6})-(?P<cal>\w*Calibrat\w*)$")
# a name may hold ": " itself (TensorFlow's "input:0" does not; a name ending in ": " would be odd): the last ": "
# splits; TensorRT writes the scale's bits with std::hex, so leading zeros may be missing
ENTRY = re.compile(r"^(?P<name>\S.*?): (?P<hex>[0-9a-fA-F]{1,8})$")
QMAX = 127  # INT8's largest level: dynamic range = scale * 127
FORMAT = (
    "a TensorRT calibration cache is a 'TRT-<version>-<calibrator>' line, then one 'tensor name: scale' line per "
    "tensor, the scale as the 8 hex digits of its float32 (e.g. 'input: 3c010a14')"
)


@dataclass(frozen=True)
class CacheEntry:
    scale: float
    line: int  # 1-based line of the file

    @property
    def limit(self) -> float:
        """The dynamic range: the largest |x| INT8 represents with this scale."""
        return self.scale * QMAX


@dataclass(frozen=True)
class CalibrationCache:
    path: Path
    header: str | None
    calibrator: str | None
    version: str | None  # "8.6.1", "10.3.0"
    entries: dict[str, CacheEntry] = field(default_factory=dict)


def version_of(n: str) -> str:
    """TensorRT's version number of a cache header: 8601 -> 8.6.1, 100300 -> 10.3.0."""
    if len(n) == 4:
        return f"{n[0]}.{n[1]}.{int(n[2:])}"
    return f"{int(n[:-4])}.{int(n[-4:-2])}.{int(n[-2:])}"


def scale_of(hexs: str) -> float:
    """The float32 whose big-endian bits `hexs` spells (leading zeros may be missing)."""
    return float(struct.unpack(">f", bytes.fromhex(hexs.zfill(8)))[0])


def parse(text: str, path: Path) -> CalibrationCache:
    """The cache in `text` (read from `path`); UsageError naming `path:line` and what is wrong."""
    header = calibrator = version = None
    entries: dict[str, CacheEntry] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        head = HEADER.match(line)
        if head and header is None and not entries:
            header, calibrator, version = line, head.group("cal"), version_of(head.group("n"))
            continue
        m = ENTRY.match(line)
        if m is None:
            raise UsageError(f"{path}:{no}: {line[:80]!r} is not 'tensor name: scale': {FORMAT}")
        name, scale = m.group("name"), scale_of(m.group("hex"))
        if not math.isfinite(scale) or scale < 0:
            raise UsageError(
                f"{path}:{no}: the scale of '{name}' ({m.group('hex')}) is {scale}: a scale is a finite float32 >= 0"
            )
        if name in entries:
            raise UsageError(f"{path}:{no}: '{name}' again (first on line {entries[name].line}): one line per tensor")
        entries[name] = CacheEntry(scale, no)
    if not entries:
        raise UsageError(f"{path}: no tensor scales: {FORMAT}")
    return CalibrationCache(path, header, calibrator, version, entries)


def read(path: Path) -> CalibrationCache:
    """The cache file at `path`; UsageError (exit 2) naming the file and line where it is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the calibration cache ({exc.strerror or exc})") from exc
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not text (byte {exc.start}): {FORMAT}") from exc
    return parse(text, Path(path))
