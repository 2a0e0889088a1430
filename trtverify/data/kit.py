"""A capture kit (`trtverify capture`): the feeds trtverify compares, in the formats the target machine's tools read,
and the exact commands that capture the engine's tensors there.

Written: `inputs.json` (Polygraphy `--load-inputs`: a list of feed dicts, each array `{"array": base64 of np.save,
"polygraphy_class": "ndarray"}`, what Polygraphy's `--save-inputs` writes; after the kit's feeds, its consistency feeds:
trtverify/data/kitfeeds.py), `trtexec/NAME.bin` (raw C-order
little-endian values per input, for `--loadInputs='NAME':FILE`; one feed only, as trtexec runs one), `inputs.npz`
(the feeds as rows, what `trtverify layerwise --captured` feeds the reference), `manifest.json` (input names,
shapes, dtypes, the sha256 digest of the feeds), `run_engine.py` (a runner script that needs only tensorrt and numpy,
kept in trtverify/data/kitfiles/ and copied as is) and `README.md` (the commands).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shlex
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from trtverify.data.kitfeeds import ConsistencyFeed, consistency_feeds
from trtverify.toolout.captures import escape_name
from trtverify.toolout.kit import KIT_FORMAT, MANIFEST, feed_digest, feeds_digest
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import atomic_write, atomic_write_json, atomic_write_text
from trtverify.util.words import count

RUNNER = "run_engine.py"  # the kit's runner script (trtverify/data/kitfiles/), for targets without Polygraphy, trtexec


def b64_npy(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def polygraphy_inputs(feeds: Sequence[dict[str, np.ndarray]], path: Path) -> None:
    """Polygraphy's `--load-inputs` JSON: a list of feeds, arrays as Polygraphy's JSON encoder writes them."""
    doc = [{n: {"array": b64_npy(a), "polygraphy_class": "ndarray"} for n, a in feed.items()} for feed in feeds]
    atomic_write_text(path, json.dumps(doc))


def polygraphy_outputs(iterations: Sequence[dict[str, np.ndarray]], path: Path, runner: str) -> None:
    """Polygraphy's RunResults JSON (`--save-outputs`, read by `--load-outputs`): one runner, an IterationResult of
    `iterations`' arrays each, arrays as in `polygraphy_inputs`."""
    its = [{"outputs": {n: {"array": b64_npy(a), "polygraphy_class": "ndarray"} for n, a in it.items()},
            "runtime": 0.0, "runner_name": runner, "polygraphy_class": "IterationResult"}
           for it in iterations]  # fmt: skip
    atomic_write_text(path, json.dumps({"lst": [[runner, its]], "polygraphy_class": "RunResults"}))


def raw_files(folder: Path, arrays: dict[str, np.ndarray], under: str) -> dict[str, str]:
    """One raw file per array as trtexec's --loadInputs and --loadRefOutputs read them (its bytes, C order, little
    endian), named by `escape_name`: {name: its path, `under` + the file's name}."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, value in arrays.items():
        arr = np.ascontiguousarray(value, dtype=np.asarray(value).dtype.newbyteorder("<"))
        atomic_write(folder / f"{escape_name(name)}.bin", lambda fh, arr=arr: fh.write(arr.tobytes()))
        out[name] = f"{under}{escape_name(name)}.bin"
    return out


def _rows(
    feeds: Sequence[dict[str, np.ndarray]],
    ranks: dict[str, int | None],
    declared: dict[str, tuple[object, ...] | None] | None = None,
) -> tuple[dict[str, np.ndarray], int]:
    """The feeds as rows of an .npz the inputs reader splits back into the same feeds (with `inputs.batch_size`, the
    second value): concatenated along the batch axis where a feed has the model input's rank, stacked where the
    input has no batch axis, or a fixed first axis (torchvision's detectors' [3, H, W], a batch fixed at 4): read
    as one feed per row with no `batch_size`, as a suite naming the kit's inputs.npz reads it."""
    fixed = {n for n, shape in (declared or {}).items() if shape and isinstance(shape[0], int) and shape[0] > 0}
    out = {}
    batches = set()
    for name in feeds[0]:
        parts = [f[name] for f in feeds]
        if ranks.get(name) == parts[0].ndim and parts[0].ndim and name not in fixed:
            out[name] = np.concatenate(parts, axis=0)
            batches.add(parts[0].shape[0])
        else:
            out[name] = np.stack(parts)
    if fixed & set(out) and batches - {1}:  # stacked beside rows of several: as before, all along the first axis
        return _rows(feeds, ranks)
    return out, (batches.pop() if len(batches) == 1 else 1)


def shell_dq(text: str) -> str:
    """`text` in double quotes for a POSIX shell (single quotes inside stay literal, as trtexec wants them)."""
    return '"' + "".join("\\" + c if c in '"$`\\' else c for c in text) + '"'


def _profile(names: list[str], dims: dict[str, list[int]], extra: Sequence[ConsistencyFeed]) -> str:
    """Polygraphy's options for a dynamic model's engine profile: at the kit's shapes (min = opt = max), or from the
    smallest to the largest shape fed where the consistency feeds' batches differ from the kit's."""

    def arg(shapes: dict[str, list[int]]) -> str:
        return " ".join(shlex.quote(f"{n}:{shapes[n]}".replace(" ", "")) for n in names)

    every = [dims] + [{n: list(c.feed[n].shape) for n in names} for c in extra]
    if all(s == dims for s in every):
        return " --input-shapes " + arg(dims)
    low = {n: [min(d) for d in zip(*(s[n] for s in every))] for n in names}
    high = {n: [max(d) for d in zip(*(s[n] for s in every))] for n in names}
    return f" --trt-min-shapes {arg(low)} --trt-opt-shapes {arg(dims)} --trt-max-shapes {arg(high)}"


def _consistency_text(extra: Sequence[ConsistencyFeed], samples: int, not_possible: dict[str, str]) -> str:
    what = {"repeat": "feed 0 again (determinism: the same engine, the same feed, the same bits)",
            "duplicated_row": "a batch holding row 0 twice (both rows' outputs must be identical)",
            "repeated_batch": "row 0 repeated {rows} times (each row must equal row 0 of feed 0, within the tolerance "
                              "of a batch-size tactic change)"}  # fmt: skip
    lines = [f"- feed {samples + k}: {what[c.role].format(rows=c.rows)}" for k, c in enumerate(extra)]
    lines += [f"- no {role.replace('_', ' ')} feed: {why}" for role, why in not_possible.items()]
    return "\n".join(lines)


def readme(
    reference: Path,
    names: list[str],
    dims: dict[str, list[int]],
    dynamic: bool,
    samples: int,
    extra: Sequence[ConsistencyFeed] = (),
    not_possible: dict[str, str] | None = None,
    refs: dict[str, str] | None = None,
) -> str:
    ref = shlex.quote(f"../{reference.name}")
    # one flag, its specs joined by commas: trtexec reads one --loadInputs (sampleOptions.cpp getAndDelOption, then
    # splitToStringVec(list, ',')), so a repeated flag would not load the other inputs
    load = shell_dq("--loadInputs=" + ",".join(f"'{n}':trtexec/{escape_name(n)}.bin" for n in names))
    shapes = "--shapes=" + ",".join(f"'{n}':{'x'.join(map(str, dims[n]))}" for n in names)
    pg_shapes = _profile(names, dims, extra) if dynamic else ""
    run = f"polygraphy run {ref} --trt{pg_shapes} --load-inputs inputs.json"
    marked = f"{run} --trt-outputs mark all --save-outputs captured/outputs.json"
    marked += " --save-inputs captured/outputs.inputs.json"
    trtexec = (
        f"trtexec --onnx={ref} {load}{' ' + shell_dq(shapes) if dynamic else ''} --exportOutput=captured/trtexec.json"
    )
    if refs:  # trtexec's own check (TensorRT 11: --loadRefOutputs, samples/common/sampleInference.cpp), feed 0
        check = shell_dq("--loadRefOutputs=" + ",".join(f"'{n}':{f}" for n, f in refs.items()))
        trtexec += f" {check} --accuracyAlgorithm=cos --accuracyThreshold=1e-3"
    if samples > 1:
        trtexec += f"\n\n(trtexec runs one feed, the kit's feed 0 of {samples}: trtverify compares it on feed 0 alone)"
    # debug tensors: trtexec writes them into the folder it runs in (debugTensorWriter.cpp), so it runs in one
    deeper = shell_dq("--loadInputs=" + ",".join(f"'{n}':../../trtexec/{escape_name(n)}.bin" for n in names))
    debug = (
        f"mkdir -p captured/debug && (cd captured/debug && trtexec --onnx={shlex.quote(f'../../../{reference.name}')} "
        f"{deeper}{' ' + shell_dq(shapes) if dynamic else ''} --markUnfusedTensorsAsDebugTensors "
        "--saveAllDebugTensors=numpy,summary --iterations=1 --warmUp=0 --duration=0)"
        if samples == 1
        else trtexec
    )
    return f"""# Capture kit for {reference.name}

Made by `trtverify capture`. Copy this folder to the machine where the TensorRT engine runs, with {reference.name}
beside it (the commands read ../{reference.name}, the ONNX the engine is built from), run one of the commands below
in this folder, copy the `captured/` folder back into the kit, then compare:

    trtverify layerwise {reference.name} --captured KIT/captured/outputs.json

{count(samples, "feed")}; their sha256 digest is in manifest.json, and a capture is compared only with these feeds:
the inputs Polygraphy fed, saved beside its capture (`--save-inputs`), must have that digest.

`inputs.json` then holds {count(len(extra), "consistency feed")}, which the same commands run as further iterations
(no extra step); trtverify checks the engine against itself with them:

{_consistency_text(extra, samples, not_possible or {})}

## Every tensor (Polygraphy, TensorRT runner)

    mkdir -p captured
    {marked}

Marking every tensor changes what TensorRT fuses: the engine measured is not quite the one deployed. Compare its
outputs with an outputs-only capture of the same engine.

## Outputs only (Polygraphy)

    {run} --save-outputs captured/outputs_only.json --save-inputs captured/outputs_only.inputs.json

## trtexec (outputs only, one feed)

trtexec runs one feed, feed 0: its capture holds no consistency feeds (capture with Polygraphy for those checks).

    {trtexec}

trtexec reads `trtexec/*.bin` as raw values of the engine input's type (C order, little endian, {
        ", ".join(f"{n}: {'x'.join(map(str, dims[n]))}" for n in names)
    }); an engine whose inputs are FP16 needs them converted.

## Neither Polygraphy nor trtexec: the runner script

`run_engine.py` needs only TensorRT's Python package (8.6 to 11) and numpy, on Python 3.8 or newer; device memory
comes from libcudart.so through ctypes (`--cudart PATH` if it is not found). In this folder:

    python3 run_engine.py --onnx {ref} --mark-all --out captured/runner
    python3 run_engine.py --onnx {ref} --out captured/runner_outputs_only
    python3 run_engine.py --engine YOUR.engine --out captured/runner_engine

The first builds the engine here with every tensor an output, the second with the model's outputs only (add
`--fp16`, `--bf16` or `--int8` up to TensorRT 10 to build as you deploy; TensorRT 11 takes the precision from
the ONNX model), the third runs an engine built elsewhere for this GPU. Each writes a folder per feed (`0/`, `1/`,
... one `.npy` per tensor) and `run.json` (TensorRT version, GPU, engine, the digest of the inputs it fed); compare
with `trtverify layerwise {reference.name} --captured KIT/captured/runner`.

## trtexec debug tensors (every tensor the engine keeps, one feed; TensorRT 10.12 and later)

    {debug}

then compare `KIT/captured/debug`. Unlike marking every tensor an output, debug tensors keep the engine's fusions;
what it fused away is counted as not captured. `--saveAllDebugTensors=summary` alone writes statistics only (min,
max, average): compared as statistics.

## Not in this kit yet

No validation batches for e2e.
"""


def write_kit(
    out: Path,
    reference: Path,
    feeds: Sequence[dict[str, np.ndarray]],
    ranks: dict[str, int | None],
    dynamic: bool,
    declared: dict[str, tuple[object, ...] | None] | None = None,
    outputs: Sequence[tuple[object, ...] | None] = (),
) -> dict[str, object]:
    """Write the kit into `out`; returns the manifest. `declared`: each input's declared shape, and `outputs` each
    graph output's, for the consistency feeds (trtverify/data/kitfeeds.py; none without `declared`)."""
    if not feeds:
        raise UsageError("no feeds to put into the kit")
    names = list(feeds[0])
    shapes = {n: set(tuple(f[n].shape) for f in feeds) for n in names}
    dtypes = {n: {str(f[n].dtype) for f in feeds} for n in names}
    for n in names:
        if len(shapes[n]) > 1 or len(dtypes[n]) > 1:
            first = next(
                i for i, f in enumerate(feeds) if f[n].shape != feeds[0][n].shape or f[n].dtype != feeds[0][n].dtype
            )
            raise UsageError(f"input '{n}': the feeds differ in shape or dtype ({shapes[n]}, {dtypes[n]}); a kit holds "
                             f"feeds of one shape: feed {first} is the first of another, --samples {first} takes those "
                             "before it (the inputs Polygraphy saved beside a capture hold the kit's consistency "
                             "feeds after its own)")  # fmt: skip
    extra, not_possible = consistency_feeds(feeds[0], declared, outputs) if declared is not None else ([], {})
    out.mkdir(parents=True, exist_ok=True)
    polygraphy_inputs([*feeds, *(c.feed for c in extra)], out / "inputs.json")
    raw = out / "trtexec"
    raw_files(raw, {n: feeds[0][n] for n in names}, "trtexec/")  # the first feed: trtexec runs one
    refs, refs_note = _reference_outputs(reference, feeds[0], raw / "ref")
    rows, batch = _rows(feeds, ranks, declared)
    buf = io.BytesIO()
    np.savez(buf, **rows)
    atomic_write(out / "inputs.npz", lambda fh: fh.write(buf.getvalue()))
    digests = [feed_digest(f) for f in feeds]
    extra_digests = [feed_digest(c.feed) for c in extra]
    manifest: dict[str, object] = {
        "trtverify_kit": KIT_FORMAT,
        "reference": reference.name,
        "reference_sha256": hashlib.sha256(reference.read_bytes()).hexdigest(),
        "samples": len(feeds),
        "batch_size": batch,  # rows of inputs.npz per feed
        "inputs": [{"name": n, "shape": list(next(iter(shapes[n]))), "dtype": next(iter(dtypes[n]))} for n in names],
        "digest": feeds_digest(digests),
        "sample_digests": digests,
        # the consistency feeds, after the kit's own in inputs.json: a capture holds them as further iterations
        "consistency": {
            "feeds": [c.manifest(len(feeds) + k, d) for k, (c, d) in enumerate(zip(extra, extra_digests))],
            "not_possible": not_possible,
        },
        "capture_digest": feeds_digest(digests + extra_digests),  # of every feed of inputs.json
        "files": {
            "polygraphy": "inputs.json",
            "npz": "inputs.npz",
            "trtexec": {n: f"trtexec/{escape_name(n)}.bin" for n in names},
            # the reference's outputs on feed 0 (ONNX Runtime, CPU), for trtexec --loadRefOutputs
            "trtexec_reference_outputs": refs,
        },
    }
    if refs_note:
        manifest["reference_outputs_not_written"] = refs_note
    atomic_write_json(out / MANIFEST, manifest)
    dims = {n: list(next(iter(shapes[n]))) for n in names}
    text = readme(reference, names, dims, dynamic, len(feeds), extra, not_possible, refs)
    atomic_write_text(out / "README.md", named_kit(text, out))
    runner = resources.files("trtverify.data").joinpath("kitfiles", RUNNER).read_text(encoding="utf-8")
    atomic_write_text(out / RUNNER, runner)
    return manifest


def named_kit(text: str, kit: Path) -> str:
    """README text with its `KIT/` placeholder made the kit's folder as given to --out."""
    return text.replace("KIT/", f"{kit.as_posix().rstrip('/')}/")


def _reference_outputs(reference: Path, feed: dict[str, np.ndarray], folder: Path) -> tuple[dict[str, str], str]:
    """The reference's outputs on `feed` (ONNX Runtime on the CPU), one raw file per graph output as trtexec's
    --loadRefOutputs reads it (the output's bytes, C order, little endian): {output: path in the kit}, and why none
    were written where ONNX Runtime cannot run the model here (a plugin node without its library, ...)."""
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, feed)
    except Exception as exc:  # noqa: BLE001 - the kit is still useful without them: say why
        return {}, f"ONNX Runtime could not run {reference.name} here ({type(exc).__name__}: {str(exc)[:200]})"
    numbers = {n: np.asarray(v) for n, v in zip(names, values) if np.asarray(v).dtype.kind in "biuf"}
    return raw_files(folder, numbers, "trtexec/ref/"), ""


__all__ = ["named_kit", "polygraphy_inputs", "polygraphy_outputs", "raw_files", "readme", "write_kit"]
