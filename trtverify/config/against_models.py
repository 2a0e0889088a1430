"""The suite checked against its models, before anything runs: every name or size a later stage
reads from a model file is looked up here, so a typo is exit 2 at `validate` (and at the start of
`run`), not exit 1 after other stages ran.

Reads only the ONNX files' inputs and outputs (and, where a suite names intermediate tensors, the
node outputs; never the weights' values); imports neither torch nor TensorRT. Every model file the
suite names must be what its key says (`file_problems`): a candidate that is not an ONNX model at
all (empty, cut short, text) is a suite error here; one that is ONNX but cannot be run (a cycle,
its external data missing, an operator ONNX Runtime lacks) is left to the stages, where a broken
model under test is a failed check (exit 1).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtverify.config.capture_kits import kit_problems
from trtverify.config.postprocess import layout_problems
from trtverify.config.registry import TASKS
from trtverify.graph.onnxinfo import TensorMeta, graph_io, onnx_io
from trtverify.toolout import calibcache
from trtverify.util.errors import Problem, UsageError, did_you_mean

if TYPE_CHECKING:
    from trtverify.config.loader import LoadedSuite

PathKey = tuple[str | int, ...]


def _names(metas: Sequence[TensorMeta]) -> str:
    return ", ".join(m.name for m in metas) or "none"


def _kind(dtype: str) -> str:
    """Comparable families: a float16 candidate of a float32 reference is expected; int vs float is not."""
    if "float" in dtype:
        return "float"
    if dtype.startswith(("int", "uint")):
        return "int"
    return dtype


def _rank(meta: TensorMeta) -> int | None:
    return None if meta.shape is None else len(meta.shape)


def graph_tensors(path: Path) -> set[str] | None:
    """Every tensor name of an ONNX graph (inputs, initializers, node outputs); None if unreadable."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # the stages report an unreadable model
        return None
    g = model.graph
    names = {v.name for v in g.input} | {v.name for v in g.output} | {i.name for i in g.initializer}
    for node in g.node:
        names.update(o for o in node.output if o)
    return names


class _Checker:
    def __init__(self, loaded: LoadedSuite, inputs: list[TensorMeta], outputs: list[TensorMeta]):
        self.loaded = loaded
        self.suite = loaded.suite
        self.inputs, self.outputs = inputs, outputs
        self.ref = Path(self.suite.models.reference).name
        self.problems: list[Problem] = []
        self._cand_io: dict[str, tuple[list[TensorMeta], list[TensorMeta]] | None] = {}

    def add(self, loc: PathKey, message: str) -> None:
        self.problems.append(self.loaded.problem(loc, message))

    def candidate_io(self, name: str) -> tuple[list[TensorMeta], list[TensorMeta]] | None:
        if name not in self._cand_io:
            cand = self.suite.models.candidates[name]
            io = None
            if cand.path is not None:
                try:
                    io = graph_io(onnx_io(Path(cand.path)))
                except UsageError:  # not ONNX: file_problems reports it
                    io = None
            self._cand_io[name] = io
        return self._cand_io[name]

    # --- models.candidates: the same interface as the reference
    def candidates(self) -> None:
        for name in self.suite.models.candidates:
            io = self.candidate_io(name)
            if io is None:
                continue
            loc: PathKey = ("models", "candidates", name)
            cand = Path(self.suite.models.candidates[name].path or "").name
            for kind, ref_side, cand_side in (("input", self.inputs, io[0]), ("output", self.outputs, io[1])):
                theirs = {m.name: m for m in cand_side}
                missing = [m.name for m in ref_side if m.name not in theirs]
                if missing and kind == "output" and self._renamed_outputs(name, missing):
                    missing = []
                if missing:
                    self.add(
                        loc,
                        f"{cand} has no {kind}(s) {', '.join(missing)} of the reference {self.ref} "
                        f"({cand} {kind}s: {_names(cand_side)}; reference {kind}s: {_names(ref_side)})",
                    )
                if kind == "input":
                    extra = [m.name for m in cand_side if m.name not in {r.name for r in ref_side}]
                    if extra:
                        self.add(loc, f"{cand} has input(s) {', '.join(extra)} that the reference {self.ref} lacks")
                for r in ref_side:
                    c = theirs.get(r.name)
                    if c is None:
                        continue
                    if _kind(r.dtype) != _kind(c.dtype):
                        self.add(loc, f"{kind} '{r.name}' is {c.dtype} in {cand} but {r.dtype} in {self.ref}")
                    if _rank(r) is not None and _rank(c) is not None and _rank(r) != _rank(c):
                        self.add(
                            loc,
                            f"{kind} '{r.name}' has rank {_rank(c)} {list(c.shape or ())} in {cand} but rank "
                            f"{_rank(r)} {list(r.shape or ())} in {self.ref}",
                        )

    def _renamed_outputs(self, candidate: str, missing: list[str]) -> bool:
        """Outputs a layerwise rename or ignore accounts for are not missing."""
        lw = self.suite.stages.layerwise
        if lw is None or candidate not in self.suite.candidates_of(lw):
            return False
        return all(m in lw.rename or m in lw.ignore for m in missing)

    # --- stages.framework: rename values and ignore/outputs names against the ONNX outputs
    def framework(self) -> None:
        fw = self.suite.stages.framework
        if fw is None:
            return
        onnx_names = [m.name for m in self.outputs]
        pt = self.suite.models.pytorch
        pt_names = list(pt.output_names) if pt is not None and pt.output_names is not None else None
        for src, dst in fw.rename.items():
            if dst not in onnx_names:
                self.add(
                    ("stages", "framework", "rename", src),
                    f"'{dst}' is not an output of {self.ref}{did_you_mean(dst, onnx_names)} "
                    f"(its outputs: {_names(self.outputs)})",
                )
            if pt_names is not None and src not in pt_names:
                self.add(
                    ("stages", "framework", "rename", src),
                    f"'{src}' is not one of models.pytorch.output_names{did_you_mean(src, pt_names)} "
                    f"({', '.join(pt_names)})",
                )
        if pt_names is None:
            return  # PyTorch output names are known only when the model runs: ignore/outputs keys may be those
        known = set(onnx_names) | set(pt_names)
        for i, name in enumerate(fw.ignore):
            if name not in known:
                self.add(
                    ("stages", "framework", "ignore", i),
                    f"'{name}' is neither an output of {self.ref} ({', '.join(onnx_names)}) nor of the PyTorch "
                    f"model ({', '.join(pt_names)}){did_you_mean(name, known)}",
                )
        for name in fw.outputs:
            if name not in pt_names:
                self.add(
                    ("stages", "framework", "outputs", name),
                    f"'{name}' is not one of the PyTorch model's outputs{did_you_mean(name, pt_names)} "
                    f"({', '.join(pt_names)})",
                )

    # --- stages.layerwise: rename, ignore and tensors name graph tensors
    def layerwise(self) -> None:
        lw = self.suite.stages.layerwise
        if lw is None or not (lw.rename or lw.ignore or lw.tensors):
            return
        ref_tensors = graph_tensors(Path(self.suite.models.reference))
        if ref_tensors is None:
            return
        cands = [n for n in self.suite.candidates_of(lw) if self.suite.models.candidates[n].path is not None]
        cand_tensors = {n: graph_tensors(Path(self.suite.models.candidates[n].path or "")) for n in cands}
        readable = [t for t in cand_tensors.values() if t is not None]
        recipes = len(readable) < len(self.suite.candidates_of(lw))  # a recipe's tensors exist only once it is made
        any_cand = set().union(*readable) if readable else set()
        for src, dst in lw.rename.items():
            if src not in ref_tensors:
                self.add(
                    ("stages", "layerwise", "rename", src),
                    f"'{src}' is not a tensor of {self.ref}{did_you_mean(src, ref_tensors)}",
                )
            if readable and not recipes and dst not in any_cand:
                self.add(
                    ("stages", "layerwise", "rename", src),
                    f"'{dst}' is not a tensor of any candidate ({', '.join(cands)}){did_you_mean(dst, any_cand)}",
                )
        for i, name in enumerate(lw.ignore):
            if name not in ref_tensors and (recipes or name not in any_cand):
                self.add(
                    ("stages", "layerwise", "ignore", i),
                    f"'{name}' is not a tensor of {self.ref} or a candidate{did_you_mean(name, ref_tensors)}",
                )
        for name in lw.tensors:
            if name not in ref_tensors:
                self.add(
                    ("stages", "layerwise", "tensors", name),
                    f"'{name}' is not a tensor of {self.ref}{did_you_mean(name, ref_tensors)}",
                )

    # --- stages.e2e: the output post-processing reads, class_names, dataset files
    def _e2e_profiles(self, e2e: Any, fed: TensorMeta | None) -> None:
        """e2e.batch_sizes against the profiles a suite gives its TensorRT backends, for the candidates e2e runs
        there (without profiles, each batch size's engine is built at its first batch)."""
        if fed is None or not e2e.batch_sizes:
            return
        names = e2e.candidates or list(self.suite.models.candidates)
        used = {self.suite.models.candidates[n].backend for n in names if n in self.suite.models.candidates}
        for backend in sorted(used & {"tensorrt", "tensorrt_rtx"}):
            profiles = getattr(self.suite.backends, backend).profiles
            for k, size in enumerate(e2e.batch_sizes):
                if profiles and not any(_covers(p, fed.name, size) for p in profiles):
                    self.add(
                        ("stages", "e2e", "batch_sizes", k),
                        f"{size}: outside every optimisation profile of backends.{backend}.profiles for input "
                        f"{fed.name}: widen a profile's batch, or remove the profiles",
                    )

    def e2e(self) -> None:
        e2e = self.suite.stages.e2e
        if e2e is None:
            return
        post = e2e.postprocess
        out_names = [m.name for m in self.outputs]
        read = self.outputs[0] if self.outputs else None
        if post.output is not None:
            read = next((m for m in self.outputs if m.name == post.output), None)
            if read is None:
                self.add(
                    ("stages", "e2e", "postprocess", "output"),
                    f"'{post.output}' is not an output of {self.ref}{did_you_mean(post.output, out_names)} "
                    f"(its outputs: {', '.join(out_names)})",
                )
            for name in e2e.candidates or list(self.suite.models.candidates):
                io = self.candidate_io(name) if name in self.suite.models.candidates else None
                if io is not None and read is not None and post.output not in {m.name for m in io[1]}:
                    self.add(
                        ("stages", "e2e", "postprocess", "output"),
                        f"'{post.output}' is not an output of candidate '{name}' (its outputs: {_names(io[1])})",
                    )
        if e2e.task == "detection" and post.hook is None:
            models = [(self.ref, self.outputs)] + [
                (f"candidate '{n}'", io[1])
                for n in (e2e.candidates or list(self.suite.models.candidates))
                if n in self.suite.models.candidates and (io := self.candidate_io(n)) is not None
            ]
            for model, outs in models:
                found = layout_problems(post, [(m.name, m.shape) for m in outs], model)
                for key, message in found:
                    self.add(("stages", "e2e", "postprocess", *key), message)
                if found:  # the first model that cannot be read says it
                    break
        pre = e2e.preprocess
        fed = next((m for m in self.inputs if m.name == pre.input), None) if pre.input else None
        fed = fed or (self.inputs[0] if self.inputs else None)
        batch = fed.shape[0] if fed is not None and fed.shape else None
        sizes = e2e.batch_sizes or [e2e.batch_size]
        unbatched = fed is not None and fed.shape is not None and len(fed.shape) == 3 and fed.shape[0] in (1, 3)
        if unbatched and e2e.task in ("detection", "segmentation") and sizes != [1]:  # [C, H, W]: one image
            self.add(
                ("stages", "e2e", "batch_sizes" if e2e.batch_sizes else "batch_size"),
                f"{self.ref}'s input {fed.name} {list(fed.shape)} has no batch axis (one image, as torchvision's "
                "detectors export it): set stages.e2e.batch_size: 1",
            )
        for k, size in enumerate(e2e.batch_sizes or []):
            if isinstance(batch, int) and batch > 0 and size != batch:
                self.add(
                    ("stages", "e2e", "batch_sizes", k),
                    f"{size}: {self.ref}'s input {fed.name} has a fixed batch of {batch}"  # type: ignore[union-attr]
                    " (export it with a dynamic batch to sweep batch sizes)",
                )
        self._e2e_profiles(e2e, fed)
        if pre.input is not None and pre.input not in {m.name for m in self.inputs}:
            self.add(
                ("stages", "e2e", "preprocess", "input"),
                f"'{pre.input}' is not an input of {self.ref}{did_you_mean(pre.input, [m.name for m in self.inputs])} "
                f"(its inputs: {_names(self.inputs)})",
            )
        names = e2e.dataset.class_names
        if names is not None and read is not None and post.hook is None and read.shape is not None:
            axis = {"classification": -1, "segmentation": 1}.get(e2e.task)
            width = read.shape[axis] if axis is not None and len(read.shape) >= 2 else None
            if isinstance(width, int) and width > 0 and len(names) != width:
                self.add(
                    ("stages", "e2e", "dataset", "class_names"),
                    f"{len(names)} class names but output '{read.name}' of {self.ref} has {width} classes "
                    f"(shape {list(read.shape)})",
                )
        self.dataset_files(e2e.dataset)

    def dataset_files(self, ds: Any) -> None:
        for key in ("npz", "csv", "coco", "folder", "images", "masks", "image_root"):
            value = getattr(ds, key, None)
            if value is None:
                continue
            path = Path(value)
            loc: PathKey = ("stages", "e2e", "dataset", key)
            try:
                if path.is_dir():
                    os.listdir(path)
                else:
                    with open(path, "rb") as fh:
                        fh.read(1)
            except FileNotFoundError:
                self.add(loc, f"{path}: not found")
                continue
            except OSError as exc:
                self.add(loc, f"{path}: cannot be read ({exc.strerror or exc})")
                continue
            if key == "npz":
                self._npz_keys(ds, path, loc)

    def _npz_keys(self, ds: Any, path: Path, loc: PathKey) -> None:
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                keys = [n[: -len(".npy")] for n in z.namelist() if n.endswith(".npy")]
        except (zipfile.BadZipFile, OSError) as exc:
            self.add(loc, f"{path}: not a readable .npz ({exc})")
            return
        e2e = self.suite.stages.e2e
        wanted = ["images_key", "masks_key" if e2e is not None and e2e.task == "segmentation" else "labels_key"]
        if e2e is not None and e2e.task in TASKS.names() and not TASKS.get(e2e.task).labels:
            wanted = wanted[:1]  # a task that reads inputs only
        for key in wanted:
            name = getattr(ds, key)
            if name not in keys:
                self.add(
                    ("stages", "e2e", "dataset", key if key in ds.model_fields_set else "npz"),
                    f"{path.name} has no array '{name}' ({key}; its arrays: {', '.join(keys) or 'none'})",
                )


def _covers(profile: dict[str, Any], name: str, batch: int) -> bool:
    r = profile.get(name)
    return r is None or (bool(r.min) and r.min[0] <= batch <= r.max[0])


def _sweep(checker: _Checker) -> None:
    """inputs.shapes: each set against the reference's declared inputs, and inside the TensorRT profiles a suite
    gives (a swept shape no engine profile accepts could never be built or run)."""
    suite = checker.suite
    sets = suite.inputs.shapes or []
    declared = {m.name: m for m in checker.inputs}
    for k, shape_set in enumerate(sets):
        for name, shape in shape_set.items():
            meta = declared.get(name)
            if meta is None or meta.shape is None:
                continue
            fixed = [(i, d) for i, d in enumerate(meta.shape) if isinstance(d, int) and d > 0]
            if len(shape) != len(meta.shape) or any(shape[i] != d for i, d in fixed):
                checker.add(
                    ("inputs", "shapes", k, name),
                    f"{shape} does not fit {checker.ref}'s input {name} {list(meta.shape)} (fixed dimensions differ)",
                )
    for backend in ("tensorrt", "tensorrt_rtx"):
        profiles = getattr(suite.backends, backend).profiles
        if not profiles:
            continue
        for k, shape_set in enumerate(sets):
            inside = [
                all(
                    name not in shape_set
                    or (len(shape_set[name]) == len(r.min) and all(
                        lo <= d <= hi for lo, d, hi in zip(r.min, shape_set[name], r.max)))
                    for name, r in prof.items()
                )
                for prof in profiles
            ]  # fmt: skip
            if not any(inside):
                checker.add(
                    ("inputs", "shapes", k),
                    f"{shape_set} is outside every optimisation profile of backends.{backend}.profiles: widen a "
                    "profile's min/max to cover it, or remove the profiles (one is then made from the sweep)",
                )


_ZIP = b"PK\x03\x04"


def _torch_file_problem(path: Path, archive: bool) -> str | None:
    """Why `path` is no file torch wrote, from its first bytes and a zip's directory (at its end, so a file cut
    short is caught without reading it): torch.save, torch.jit.save and torch.export.save write zip archives
    (`archive`: only that); torch.save's legacy format is a pickle."""
    import zipfile

    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror or exc})"
    if not head:
        return f"{path}: the file is empty (0 bytes)"
    if head == _ZIP:
        try:
            with zipfile.ZipFile(path):
                return None
        except (zipfile.BadZipFile, OSError) as exc:
            return f"{path}: a zip archive that cannot be read, cut short? ({exc})"
    if archive or head[:1] != b"\x80":  # pickle protocol 2+: torch.save's legacy format
        return f"{path}: not a file {'torch.jit.save or torch.export.save' if archive else 'torch.save'} wrote"
    return None


def file_problems(loaded: LoadedSuite) -> list[Problem]:
    """Every model file the suite names that is not what its key says: candidates that are not ONNX models (the
    reference is read by `load_io`, which says more), PyTorch files torch did not write. Cheap: a walk of the
    ONNX file's top-level structure, the first bytes and zip directory of a PyTorch file; no weight is read."""
    suite = loaded.suite
    problems = []
    pt = suite.models.pytorch
    for key, archive in (("weights", False), ("torchscript", True), ("exported", True)):
        value = getattr(pt, key) if pt is not None else None
        why = _torch_file_problem(Path(value), archive) if value is not None else None
        if why:
            problems.append(loaded.problem(("models", "pytorch", key), why))
    for name, cand in suite.models.candidates.items():
        if cand.path is not None:
            try:
                onnx_io(Path(cand.path))
            except UsageError as exc:
                problems.append(loaded.problem(("models", "candidates", name, "path"), str(exc)))
    problems += kit_problems(loaded)  # each capture's kit: beside it, made from the reference
    cache = suite.backends.tensorrt.calibration_cache
    if cache is not None and Path(cache).is_file():  # read by TensorRT and judged by layerwise: its line that is not
        try:  # one, before anything runs (a cache TensorRT writes during the run is read when layerwise judges it)
            calibcache.read(Path(cache))
        except UsageError as exc:
            problems.append(loaded.problem(("backends", "tensorrt", "calibration_cache"), str(exc)))
    return problems


def model_problems(loaded: LoadedSuite, inputs: list[TensorMeta], outputs: list[TensorMeta]) -> list[Problem]:
    """Every problem of the suite against its reference's and candidates' inputs and outputs."""
    checker = _Checker(loaded, inputs, outputs)
    _sweep(checker)
    checker.candidates()
    checker.framework()
    checker.layerwise()
    checker.e2e()
    return checker.problems
