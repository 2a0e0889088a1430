"""trtexec's raw input files as a feed: `--inputs 'NAME':FILE[,'NAME':FILE...]`, the spec of trtexec's
`--loadInputs` (samples/common/sampleOptions.cpp: `Input values spec ::= Ival[","spec]`, `Ival ::= name":"file`,
the name optionally in single quotes), each file the input's values as they lie in memory: C order, little endian,
the input's type, no header (what `trtexec --loadInputs` reads and `trtverify capture` writes, `trtexec/NAME.bin`).

The shape and type of each input are the model's: a file whose size is not the input's size is refused. A dynamic
dimension is read from the file's size when it is the input's only one; with several, the file cannot say which.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trtverify.graph.onnxinfo import TensorMeta
from trtverify.util.errors import UsageError
from trtverify.util.words import count


def is_raw_spec(value: str) -> bool:
    """Whether an --inputs value is `NAME:FILE[,...]` rather than a file."""
    return ":" in value and not Path(value).is_file()


def parse_spec(value: str) -> list[tuple[str, Path]]:
    out = []
    for part in (p for p in value.split(",") if p.strip()):
        name, sep, file = part.strip().rpartition(":")
        if not sep or not name or not file:
            raise UsageError(f"--inputs {value}: '{part}' is not NAME:FILE (trtexec's --loadInputs spec)")
        if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
            name = name[1:-1]
        out.append((name, Path(file)))
    return out


def _shape(meta: TensorMeta, path: Path, nbytes: int, itemsize: int) -> tuple[int, ...]:
    if meta.shape is None:
        raise UsageError(f"{path}: input '{meta.name}' has no declared rank: give the inputs as .npz instead")
    fixed = [d if isinstance(d, int) and d > 0 else None for d in meta.shape]
    known = int(np.prod([d for d in fixed if d is not None])) * itemsize
    free = [i for i, d in enumerate(fixed) if d is None]
    if not free:
        return tuple(fixed)  # type: ignore[arg-type]
    if len(free) > 1 or known == 0 or nbytes % known:
        raise UsageError(
            f"{path}: {count(nbytes, 'byte')} for input '{meta.name}' of shape {list(meta.shape)} {meta.dtype}: "
            f"{'its dynamic dimensions cannot be read from a size' if len(free) > 1 else 'no whole number of rows'}; "
            "give the inputs as .npz instead"
        )
    fixed[free[0]] = nbytes // known
    return tuple(fixed)  # type: ignore[arg-type]


def read_raw_inputs(value: str, model_inputs: list[TensorMeta]) -> dict[str, np.ndarray]:
    """One feed from trtexec raw input files; UsageError (exit 2) naming the file for anything that does not fit."""
    declared = {m.name: m for m in model_inputs}
    pairs = parse_spec(value)
    names = [n for n, _ in pairs]
    unknown = [n for n in names if n not in declared]
    if unknown:
        raise UsageError(f"--inputs {value}: {', '.join(unknown)} not an input of the model ({', '.join(declared)})")
    missing = [n for n in declared if n not in names]
    if missing:
        raise UsageError(f"--inputs {value}: no file for input(s) {', '.join(missing)}")
    feed = {}
    for name, path in pairs:
        if not path.is_file():
            raise UsageError(f"{path}: no such file (input '{name}')")
        meta = declared[name]
        try:
            dtype = np.dtype(meta.dtype).newbyteorder("<")
        except TypeError:
            raise UsageError(f"{path}: input '{name}' is {meta.dtype}, which raw files are not read as") from None
        nbytes = path.stat().st_size
        shape = _shape(meta, path, nbytes, dtype.itemsize)
        want = int(np.prod(shape)) * dtype.itemsize
        if nbytes != want:
            raise UsageError(
                f"{path}: {count(nbytes, 'byte')}, but input '{name}' ({'x'.join(map(str, shape))} {meta.dtype}) "
                f"takes {want}: truncated, another input's file, or another type (trtexec reads the engine's type)"
            )
        feed[name] = np.fromfile(path, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    return feed


__all__ = ["is_raw_spec", "parse_spec", "read_raw_inputs"]
