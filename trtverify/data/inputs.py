"""Build the list of feed dicts a suite describes: generated, loaded from .npz/.npy, or from a hook."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.loader import LoadedSuite
from trtverify.config.models import GeneratedInput
from trtverify.graph.onnxinfo import TensorMeta, feed_mismatch, graph_io, load_io, shape_matches
from trtverify.toolout.captures import read_feeds
from trtverify.util.errors import Problem, SuiteError, UsageError, did_you_mean
from trtverify.util.hooks import load_hook
from trtverify.util.words import count

DEFAULT_GENERATED_SAMPLES = 4


def np_dtype(name: str) -> Any:
    if name == "bfloat16":
        import ml_dtypes  # shipped with onnx

        return ml_dtypes.bfloat16
    return np.dtype(name)


def _generate(name: str, spec: GeneratedInput, seed: int, sample: int) -> np.ndarray:
    rng = np.random.default_rng([seed, sample])
    low, high = spec.range
    shape = tuple(spec.shape)
    if spec.dtype == "bool":
        return rng.random(shape) < 0.5
    if spec.dtype.startswith(("int", "uint")):
        return rng.integers(int(np.ceil(low)), int(np.floor(high)) + 1, size=shape).astype(spec.dtype)
    return rng.uniform(low, high, size=shape).astype(np_dtype(spec.dtype))


class HookError(UsageError):
    """The user's input hook raised; its traceback is the user's to read."""


def shape_label(shape_set: dict[str, list[int]]) -> str:
    """'x=8x3x224x224' (several inputs joined by ', '): how a shape set is named in results and the verdict."""
    return ", ".join(f"{name}={'x'.join(str(d) for d in shape)}" for name, shape in shape_set.items())


def build_samples(
    loaded: LoadedSuite,
    model_inputs: Sequence[TensorMeta] | None = None,
    shape_set: dict[str, list[int]] | None = None,
) -> list[dict[str, np.ndarray]]:
    """The suite's samples; `model_inputs` (else read from the reference) decide whether a file
    whose arrays have exactly the model's fixed input shapes is one sample rather than rows. `shape_set`: the
    generated inputs' shapes for one set of a shape sweep (`inputs.shapes`)."""
    cfg = loaded.suite.inputs
    if cfg.generate is not None:
        n = cfg.samples or DEFAULT_GENERATED_SAMPLES
        swept = shape_set or {}
        specs = [
            (name, spec.model_copy(update={"shape": list(swept[name])}) if name in swept else spec)
            for name, spec in cfg.generate.items()
        ]
        return [
            {
                name: _generate(name, spec, spec.seed if spec.seed is not None else cfg.seed + j, i)
                for j, (name, spec) in enumerate(specs)
            }
            for i in range(n)
        ]
    if cfg.file is not None:
        return _from_file(loaded, model_inputs)
    return _from_hook(loaded)


NUMERIC_KINDS = "biuf"  # bool, signed, unsigned, float: what a model input can be fed from a file


def open_array_file(path: Path) -> Any:
    """np.load of an .npy/.npz without pickle; a UsageError naming the file for anything unreadable."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):
            # np.load would take it for a pickle and say so: say what it is not instead
            raise UsageError(f"{path}: not a readable .npy/.npz file (it starts with {magic!r}, not a numpy header)")
        return np.load(path, allow_pickle=False)
    except UsageError:
        raise
    except FileNotFoundError:
        raise UsageError(f"{path}: file not found") from None
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise UsageError(f"{path}: cannot read without pickle ({exc}); store plain numeric arrays") from None
        raise UsageError(f"{path}: not a readable .npy/.npz file ({exc}); is it truncated?") from None
    except Exception as exc:  # BadZipFile, EOFError, zlib.error, OSError...: a damaged or foreign file
        raise UsageError(
            f"{path}: not a readable .npy/.npz file ({type(exc).__name__}: {exc}); is it truncated or another format?"
        ) from None


def read_member(data: Any, key: str, path: Path) -> np.ndarray:
    """One array of an open .npz, read now (members load lazily) and checked to be numeric."""
    try:
        arr = data[key]
    except ValueError as exc:  # object arrays fail here
        if "allow_pickle" in str(exc):
            raise UsageError(
                f"{path}: array '{key}' cannot be read without pickle ({exc}); store plain numeric arrays"
            ) from None
        raise UsageError(f"{path}: array '{key}' is not readable ({exc}); is the file truncated?") from None
    except Exception as exc:  # a damaged member: BadZipFile (CRC), EOFError, zlib.error
        raise UsageError(
            f"{path}: array '{key}' is not readable ({type(exc).__name__}: {exc}); is the file truncated?"
        ) from None
    return numeric(arr, f"{path}: array '{key}'")


def numeric(arr: np.ndarray, what: str) -> np.ndarray:
    if arr.dtype.kind not in NUMERIC_KINDS:
        raise UsageError(
            f"{what} has dtype {arr.dtype}; model inputs are read from bool, integer or float arrays "
            "(convert it with numpy before saving)"
        )
    return arr


def _model_inputs(loaded: LoadedSuite) -> dict[str, TensorMeta]:
    """The reference's declared inputs, for the one-sample rule; empty when it cannot be read here
    (preflight reports that, naming the file)."""
    from trtverify.util.errors import TrtVerifyError

    try:
        inputs, _ = graph_io(load_io(Path(loaded.suite.models.reference)))
    except TrtVerifyError:
        return {}
    return {m.name: m for m in inputs}


def is_one_sample(columns: dict[str, np.ndarray], declared: dict[str, TensorMeta]) -> bool:
    """True when every array has exactly its model input's fully fixed shape: the file is one sample
    (a model with batch fixed at 4 fed one [4, 3, H, W] array), not rows."""
    if not columns:
        return False
    for name, arr in columns.items():
        meta = declared.get(name)
        if meta is None or meta.shape is None:
            return False
        if not all(isinstance(d, int) and d > 0 for d in meta.shape) or tuple(meta.shape) != arr.shape:
            return False
    return True


def _kit_feeds(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """A capture kit's inputs.json ends with its consistency feeds (for the engine on the target only): the
    reference is fed the kit's own feeds."""
    from trtverify.toolout.kit import MANIFEST, read_kit

    if not (path.parent / MANIFEST).is_file():
        return feeds
    kit = read_kit(path.parent / MANIFEST)
    if kit.consistency and len(feeds) == kit.iterations():
        return feeds[: len(kit.sample_digests)]
    return feeds


def _from_file(loaded: LoadedSuite, model_inputs: Sequence[TensorMeta] | None = None) -> list[dict[str, np.ndarray]]:
    cfg = loaded.suite.inputs
    path = Path(cfg.file)  # type: ignore[arg-type]
    if path.suffix.lower() == ".json":  # Polygraphy's --save-inputs / --load-inputs: a list of feeds
        if cfg.arrays is not None or cfg.batch_size is not None:
            raise UsageError(f"{path}: a Polygraphy inputs file holds feeds: 'arrays' and 'batch_size' do not apply")
        feeds = _kit_feeds(path, read_feeds(path))
        if cfg.samples is not None and cfg.samples > len(feeds):
            raise loaded_error(loaded, ("inputs", "samples"), f"asks for {count(cfg.samples, 'sample')} but "
                               f"{path.name} holds {count(len(feeds), 'feed')}")  # fmt: skip
        return feeds[: cfg.samples] if cfg.samples is not None else feeds
    data = open_array_file(path)
    if isinstance(data, np.ndarray):
        ((name, spec),) = cfg.arrays.items()  # type: ignore[union-attr]
        columns = {name: (numeric(data, str(path)), spec)}
    else:
        with data:
            mapping = cfg.arrays
            if mapping is None:
                from trtverify.config.models import FileArray

                mapping = {k: FileArray() for k in data.files}
            columns = {}
            for name, spec in mapping.items():
                key = spec.key or name
                if key not in data.files:
                    raise loaded_error(
                        loaded,
                        ("inputs", "arrays", name),
                        f"{path.name} has no array '{key}' (it has: {', '.join(data.files)})",
                    )
                columns[name] = (read_member(data, key, path), spec)
    declared = {m.name: m for m in model_inputs} if model_inputs is not None else _model_inputs(loaded)
    if cfg.batch_size is None and is_one_sample({n: a for n, (a, _) in columns.items()}, declared):
        return [{name: _convert(arr, spec) for name, (arr, spec) in columns.items()}]
    rows_per_array = {n: (a.shape[0] if a.ndim else 0) for n, (a, _) in columns.items()}
    rows = set(rows_per_array.values())
    if len(rows) != 1 or 0 in rows:
        raise UsageError(f"{path}: the arrays must share a non-empty first axis (rows per array: {rows_per_array})")
    total = rows.pop()
    batch = cfg.batch_size or 1
    n = total // batch
    if cfg.samples is not None:
        if cfg.samples > n:
            raise loaded_error(
                loaded,
                ("inputs", "samples"),
                f"asks for {count(cfg.samples, 'sample')} of batch {batch} but {path.name} holds "
                f"{count(total, 'row')} ({count(n, 'sample')})",
            )
        n = cfg.samples
    if n == 0:
        raise loaded_error(
            loaded, ("inputs", "batch_size"), f"batch_size {batch} is larger than the {total} rows of {path.name}"
        )
    # an input declared without a batch axis (torchvision's detectors take one [3, H, W] image) is fed row by row,
    # each row as it is: rows of [N, 3, H, W] are N samples of [3, H, W], not [1, 3, H, W]
    unbatched = without_batch_axis({name: arr for name, (arr, _) in columns.items()}, declared)
    if unbatched and batch != 1:
        raise loaded_error(
            loaded,
            ("inputs", "batch_size"),
            f"the model's input(s) {', '.join(sorted(unbatched))} have no batch axis (rank "
            f"{_rank(declared[min(unbatched)])}): one row is one sample; leave batch_size out",
        )
    out = []
    for i in range(n):
        feed = {}
        for name, (arr, spec) in columns.items():
            feed[name] = _convert(arr[i] if name in unbatched else arr[i * batch : (i + 1) * batch], spec)
        out.append(feed)
    return out


def without_batch_axis(arrays: dict[str, np.ndarray], declared: dict[str, TensorMeta]) -> set[str]:
    """The inputs whose arrays of rows have one axis more than the input declares (torchvision's detectors take one
    [3, H, W] image, fed from rows [N, 3, H, W]): a row of them is fed as it is, not as a batch of one."""
    return {name for name, arr in arrays.items() if _rank(declared.get(name)) == arr.ndim - 1}


def _rank(meta: TensorMeta | None) -> int | None:
    return None if meta is None or meta.shape is None else len(meta.shape)


def _convert(x: np.ndarray, spec: Any) -> np.ndarray:
    if spec.scale != 1.0 or spec.offset != 0.0:
        x = x.astype(np.float64) * spec.scale + spec.offset
    if spec.dtype is not None:
        x = x.astype(np_dtype(spec.dtype))
    return np.ascontiguousarray(x)


def _from_hook(loaded: LoadedSuite) -> list[dict[str, np.ndarray]]:
    cfg = loaded.suite.inputs
    fn = load_hook(cfg.hook, loaded.search_path, what="inputs.hook")  # type: ignore[arg-type]
    out: list[dict[str, np.ndarray]] = []
    try:
        for i, feed in enumerate(fn(**cfg.args)):
            if cfg.samples is not None and i >= cfg.samples:
                break
            if not isinstance(feed, dict):
                raise HookError(
                    f"inputs.hook '{cfg.hook}' yielded a {type(feed).__name__} as sample {i}; "
                    "yield dicts of input name -> array"
                )
            out.append({str(k): np.asarray(v) for k, v in feed.items()})
    except HookError:
        raise
    except Exception as exc:
        tb = "".join(traceback.format_exception(exc)[-6:])
        raise HookError(f"inputs.hook '{cfg.hook}' raised {type(exc).__name__}: {exc}\n{tb}") from exc
    if not out:
        raise HookError(f"inputs.hook '{cfg.hook}' yielded no samples; comparing zero samples is never a pass")
    return out


def loaded_error(loaded: LoadedSuite, loc: tuple[str | int, ...], message: str) -> SuiteError:
    return SuiteError([loaded.problem(loc, message)])


def static_input_problems(loaded: LoadedSuite, model_inputs: Sequence[TensorMeta]) -> list[Problem]:
    """Problems visible without running anything: generated/array names and shapes vs the model."""
    cfg = loaded.suite.inputs
    declared = {m.name: m for m in model_inputs}
    problems = []
    names: dict[str, tuple[str | int, ...]] = {}
    if cfg.generate is not None:
        names = {n: ("inputs", "generate", n) for n in cfg.generate}
    elif cfg.arrays is not None:
        names = {n: ("inputs", "arrays", n) for n in cfg.arrays}
    ref = Path(loaded.suite.models.reference).name
    for name, loc in names.items():
        if name not in declared:
            problems.append(
                loaded.problem(
                    loc,
                    f"'{name}' is not an input of {ref}{did_you_mean(name, declared)} (its inputs: "
                    f"{', '.join(declared)})",
                )
            )
    if names:
        for name in declared:
            if name not in names:
                problems.append(loaded.problem(loc_parent(names), f"input '{name}' of {ref} is not given"))
    if cfg.generate is not None:
        for name, spec in cfg.generate.items():
            if name in declared:
                why = shape_matches(declared[name].shape, tuple(spec.shape))
                if why:
                    problems.append(loaded.problem(("inputs", "generate", name, "shape"), why))
                if declared[name].dtype != spec.dtype and not (
                    spec.dtype.startswith("float") and declared[name].dtype.startswith("float")
                ):
                    problems.append(
                        loaded.problem(
                            ("inputs", "generate", name, "dtype"),
                            f"{spec.dtype} but {ref} declares {declared[name].dtype}",
                        )
                    )
        for k, shapes in enumerate(cfg.shapes or [{}]):  # each set of a sweep, over the generated shapes
            sizes = {n: tuple(shapes.get(n, spec.shape)) for n, spec in cfg.generate.items() if n in declared}
            why = shared_dim_mismatch({n: np.broadcast_to(np.float32(0), s) for n, s in sizes.items()}, declared)
            if why:
                problems.append(loaded.problem(("inputs", "shapes", k) if cfg.shapes else ("inputs", "generate"), why))
    pt = loaded.suite.models.pytorch
    if pt is not None and pt.input_names is not None:
        for i, name in enumerate(pt.input_names):
            if name not in declared:
                problems.append(
                    loaded.problem(
                        ("models", "pytorch", "input_names", i),
                        f"'{name}' is not an input of {ref}{did_you_mean(name, declared)} (its inputs: "
                        f"{', '.join(declared)})",
                    )
                )
    return problems


def loc_parent(names: dict[str, tuple[str | int, ...]]) -> tuple[str | int, ...]:
    return next(iter(names.values()))[:-1]


FLOATS = ("float16", "float32", "float64")  # what a float array is cast to where the model declares it


def dtype_mismatch(name: str, given: Any, declared: str) -> str | None:
    """None when an array of dtype `given` feeds an input declared `declared` (the same type, or float to float,
    which the backends cast), else what is wrong and what to do."""
    given = np.dtype(given)
    if str(given) == declared or (given.kind == "f" and declared in FLOATS):
        return None
    return (
        f"input '{name}': {given} given, the model takes {declared} (give it as {declared}; a suite converts an "
        f"inputs file's array with inputs.arrays.{name}.dtype: {declared})"
    )


def shared_dim_mismatch(feed: dict[str, np.ndarray], declared: dict[str, TensorMeta]) -> str | None:
    """None when the inputs agree on every dynamic dimension they share by name (input_ids and attention_mask
    both [batch, seq]), else the first disagreement, naming both inputs."""
    seen: dict[str, tuple[str, int, int]] = {}  # dimension name -> (input, axis, size) where first met
    for name, arr in feed.items():
        shape = declared[name].shape if name in declared else None
        if shape is None or len(shape) != np.ndim(arr):
            continue
        for axis, dim in enumerate(shape):
            if not isinstance(dim, str) or not dim:
                continue
            size = int(np.shape(arr)[axis])
            first = seen.setdefault(dim, (name, axis, size))
            if first[2] != size:
                return (
                    f"input '{first[0]}' has {dim}={first[2]} (axis {first[1]}) but input '{name}' has {dim}={size} "
                    f"(axis {axis}); the model declares both with the dimension '{dim}', so they must agree"
                )
    return None


def check_samples(samples: list[dict[str, np.ndarray]], model_inputs: Sequence[TensorMeta], source: str) -> None:
    """Every sample must feed exactly the model's inputs with fitting shapes, types the backends take, and the
    same size wherever the model names a dimension the same in two inputs."""
    if not samples:
        raise UsageError(f"{source}: no input samples; comparing zero samples is never a pass")
    declared = {m.name: m for m in model_inputs}
    for i, feed in enumerate(samples):
        why = feed_mismatch(feed, declared)
        if why:
            raise UsageError(f"{source}: sample {i} {why}")
        for name, arr in feed.items():
            why = dtype_mismatch(name, np.asarray(arr).dtype, declared[name].dtype)
            if why:
                raise UsageError(f"{source}: sample {i}, {why}")
        for name, arr in feed.items():
            why = shape_matches(declared[name].shape, tuple(arr.shape))
            if why and why.startswith("dimension 0 "):
                why += (
                    "; the first axis of an inputs file is rows (inputs.batch_size: N reads N rows per sample), "
                    "and a file whose arrays have exactly the model's fixed input shapes is one sample"
                )
            if why:
                raise UsageError(f"{source}: sample {i}, input '{name}': {why}")
        why = shared_dim_mismatch(feed, declared)
        if why:
            raise UsageError(f"{source}: sample {i}: {why}")


def inputs_source(loaded: LoadedSuite) -> str:
    """How errors in the suite's samples name where they came from: the suite, and its inputs file or hook."""
    cfg = loaded.suite.inputs
    where = f" ({cfg.file})" if cfg.file is not None else f" (inputs.hook '{cfg.hook}')" if cfg.hook else ""
    return f"inputs of {loaded.path}{where}"
