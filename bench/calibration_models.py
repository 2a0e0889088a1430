"""The models, data and e2e measures of calibration_methods.py (its docstring says what and why)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
SUITES = ROOT / "suites"
SHAPES_SEED, CALIB_STREAM = 20240612, 2  # demo/shapes and demo/shapes_seg make_demo.py: calibration image j


@dataclass(frozen=True)
class Model:
    name: str
    reference: Path
    description: str
    data: Callable[[Path], tuple[dict, dict]]  # work dir -> (calibration feeds, evaluation feeds)
    e2e_suite: Callable[[Path, dict], dict] | None = None  # (work dir, {tag: candidate}) -> suite
    e2e_metric: str | None = None
    proxy: Callable[[Path, Path, Path], tuple[float, str]] | None = None  # (ref, cand, work) -> (value, note)
    proxy_metric: str | None = None


def demo_e2e(suite_file: str, dataset: dict | None = None) -> Callable[[Path, dict], dict]:
    """An e2e-only suite from a demo suite: its e2e stage (paths made absolute), our candidates."""

    def make(work: Path, candidates: dict) -> dict:
        src = yaml.safe_load((SUITES / suite_file).read_text())
        e2e = src["stages"]["e2e"]
        ds = dict(e2e["dataset"])
        for key in ("npz", "coco", "images", "masks"):
            if key in ds:
                ds[key] = str((SUITES / ds[key]).resolve())
        ds.update(dataset(work) if dataset else {})
        return {
            "name": f"calibration-{src['name']}",
            "python_path": [str((SUITES / p).resolve()) for p in src.get("python_path", [])],
            "models": {"reference": str((SUITES / src["models"]["reference"]).resolve()), "candidates": candidates},
            "inputs": {"file": str(work / "eval.npz")},  # required by a suite; the e2e stage reads its dataset
            "stages": {"e2e": {**e2e, "dataset": ds}},
        }

    return make


# ---------------------------------------------------------------- Fashion-MNIST (and the fp16_repair model)
def fashion_data(work: Path) -> tuple[dict, dict]:
    images = np.load(DEMO / "fashion_mnist" / "data" / "test_subset.npz")["images"].astype(np.float32) / 255.0
    return {"input": images[:512]}, {"input": images[1000:1064]}


def fashion_e2e_rows(work: Path) -> dict:
    """e2e on rows 512-1999: none of them calibrated anything."""
    data = np.load(DEMO / "fashion_mnist" / "data" / "test_subset.npz")
    path = work / "e2e_rows.npz"
    np.savez(path, images=data["images"][512:], labels=data["labels"][512:])
    return {"npz": str(path)}


# ---------------------------------------------------------------- shapes detection and segmentation
def _shapes():
    for p in (DEMO / "shapes", DEMO / "shapes_seg"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import shapes_data

    return shapes_data


def _val_images(folder: Path, n: int) -> np.ndarray:
    from PIL import Image

    files = sorted(folder.glob("*.png"))[:n]
    return (
        np.stack([np.asarray(Image.open(f).convert("RGB"), np.float32) / 255.0 for f in files])
        .transpose(0, 3, 1, 2)
        .copy()
    )


def shapes_data(n_calib: int, val: Path, sample: bool) -> Callable[[Path], tuple[dict, dict]]:
    """The demo's own calibration images (make_demo.py: keys [seed, 2, 0, j]) and 32 validation images."""

    def make(work: Path) -> tuple[dict, dict]:
        sd = _shapes()
        calib = np.empty((n_calib, 3, 128, 128), np.float32)
        for j in range(n_calib):
            rng = np.random.default_rng([SHAPES_SEED, CALIB_STREAM, 0, j])
            img = sd.make_sample(rng)[0] if sample else sd.make_image(rng)[0]
            calib[j] = img.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0)
        return {"images": calib}, {"images": _val_images(val, 32)}

    return make


# ---------------------------------------------------------------- PP-OCRv4 (rapidocr_onnxruntime wheel)
def _ort(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3  # ModelOpt's graphs make ONNX Runtime warn about constant folding
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _run(path: Path, x: np.ndarray, batch: int = 8) -> np.ndarray:
    sess = _ort(path)
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: x[i : i + batch]})[0] for i in range(0, len(x), batch)])


def det_proxy(ref: Path, cand: Path, work: Path) -> tuple[float, str]:
    """IoU of the binarised text maps (p > 0.3, PaddleOCR's DB threshold), candidate against FP32."""
    x = np.load(work / "eval.npz")["x"]
    r, c = _run(ref, x) > 0.3, _run(cand, x) > 0.3
    iou = float((r & c).sum() / max(1, (r | c).sum()))
    return iou, f"FP32 marks {r.mean():.3%} of pixels as text"


def _ctc(probs: np.ndarray) -> list[tuple[int, ...]]:
    out = []
    for idx in probs.argmax(-1):
        keep = (idx != 0) & np.concatenate([[True], idx[1:] != idx[:-1]])
        out.append(tuple(int(i) for i in idx[keep]))
    return out


def rec_proxy(ref: Path, cand: Path, work: Path) -> tuple[float, str]:
    """Fraction of lines whose CTC greedy decoding equals FP32's; the note: FP32's exact reads."""
    import onnx

    x = np.load(work / "eval.npz")["x"]
    texts = (work / "eval_texts.txt").read_text().split("\n")
    chars = [
        "<blank>",
        *dict((p.key, p.value) for p in onnx.load(str(ref), load_external_data=False).metadata_props)[
            "character"
        ].splitlines(),
        " ",
    ]
    r, c = _ctc(_run(ref, x)), _ctc(_run(cand, x))
    exact = sum("".join(chars[i] for i in seq).strip() == t for seq, t in zip(r, texts, strict=True))
    return float(
        np.mean([a == b for a, b in zip(r, c, strict=True)])
    ), f"FP32 reads {exact} of {len(texts)} lines exactly"


def ocr_models(folder: Path) -> dict[str, Model]:
    from ocr_inputs import det_batch, rec_batch

    def det(work: Path) -> tuple[dict, dict]:
        return {"x": det_batch(64, 1)}, {"x": det_batch(32, 2)}

    def rec(work: Path) -> tuple[dict, dict]:
        x, texts = rec_batch(64, 2)
        (work / "eval_texts.txt").write_text("\n".join(texts))
        return {"x": rec_batch(64, 1)[0]}, {"x": x}

    return {
        "ocr_det": Model(
            "ocr_det",
            folder / "ch_PP-OCRv4_det_infer.onnx",
            "PP-OCRv4 text detector (DB, MobileNetV3-style backbone), synthesised text images at 1x3x320x320",
            det,
            proxy=det_proxy,
            proxy_metric="text-map IoU vs FP32",
        ),
        "ocr_rec": Model(
            "ocr_rec",
            folder / "ch_PP-OCRv4_rec_infer.onnx",
            "PP-OCRv4 text recognizer (SVTR-LCNet, CTC over 6625 classes), synthesised text lines at 1x3x48x320",
            rec,
            proxy=rec_proxy,
            proxy_metric="lines decoded as FP32",
        ),
    }


MODELS: dict[str, Model] = {
    "fashion_mnist": Model(
        "fashion_mnist",
        DEMO / "fashion_mnist" / "fashion_cnn_fp32.onnx",
        "Fashion-MNIST CNN (4 conv blocks, 2 Gemms)",
        fashion_data,
        demo_e2e("fashion_mnist.yaml", fashion_e2e_rows),
        "accuracy",
    ),
    "fp16_repair": Model(
        "fp16_repair",
        DEMO / "fp16_repair" / "fashion_bn_fp32.onnx",
        "the Fashion-MNIST CNN with a post-ReLU BatchNorm whose running variance is 1e8 on one channel",
        fashion_data,
        demo_e2e("fashion_mnist.yaml", fashion_e2e_rows),
        "accuracy",
    ),
    "shapes": Model(
        "shapes",
        DEMO / "shapes" / "shapes_fp32.onnx",
        "CenterNet-style shapes detector (19 Conv, FPN)",
        shapes_data(256, DEMO / "shapes" / "val" / "images", sample=False),
        demo_e2e("shapes_detection.yaml"),
        "map",
    ),
    "shapes_seg": Model(
        "shapes_seg",
        DEMO / "shapes_seg" / "seg_fp32.onnx",
        "U-Net-style shapes segmenter (14 Conv)",
        shapes_data(128, DEMO / "shapes_seg" / "val" / "images", sample=True),
        demo_e2e("shapes_segmentation.yaml"),
        "miou",
    ),
}
