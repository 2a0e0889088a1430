#!/usr/bin/env python3
"""Build the trtverify Fashion-MNIST demo artefacts (reproducible, CPU only).

Steps:
  1. read the Fashion-MNIST IDX files from the Debian package
     ``dataset-fashion-mnist`` (/usr/share/datasets/fashion-mnist);
  2. train ``fmnist_model.FashionCNN`` on CPU with fixed seeds and
     deterministic algorithms;
  3. save the state_dict (``fashion_cnn.pt``, loadable with weights_only=True);
  4. export ONNX FP32 (``fashion_cnn_fp32.onnx``, opset 17, input ``input``
     [batch,1,28,28] float32, output ``logits`` [batch,10]);
  5. make an INT8 QDQ model (``fashion_cnn_int8_qdq.onnx``, symmetric QInt8
     activations and per-channel weights, float biases, Q/DQ on Conv/Gemm
     inputs only -- a form TensorRT accepts; calibrated on 512 training images)
     and an FP16 model with float32 I/O (``fashion_cnn_fp16.onnx``);
  6. write the 2,000-image test subset (``data/test_subset.npz``) and its
     licence note (``data/LICENSE.md``);
  7. evaluate PyTorch / ORT FP32 / ORT FP16 / ORT INT8 on the subset and
     write ``metrics.json``.

Usage:  python demo/fashion_mnist/make_demo.py [--epochs N] [--out DIR] [--threads T]

Bit-exact reproducibility of the trained weights is expected only for the same
torch version, CPU type and ``--threads`` value.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # demo/onnx_steps.py
import fmnist_model  # noqa: E402
from onnx_steps import make_fp16, make_int8_qdq, ort_session, rename_initializers, seed_everything  # noqa: E402

DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
COPYRIGHT_FILE = Path("/usr/share/doc/dataset-fashion-mnist/copyright")
CLASS_NAMES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
SEED = 20240611
OPSET = 17
PER_CLASS = 200  # test subset: first 200 images of each class
N_CALIB = 512  # INT8 calibration images (first 512 training images)
BATCH_SIZE = 128
MAX_LR = 4e-3
WEIGHT_DECAY = 1e-4

PT_FILE = "fashion_cnn.pt"
FP32_FILE = "fashion_cnn_fp32.onnx"
FP16_FILE = "fashion_cnn_fp16.onnx"
INT8_FILE = "fashion_cnn_int8_qdq.onnx"


# --------------------------------------------------------------------------- data
def read_idx(path: Path) -> np.ndarray:
    """Read a (gzipped) IDX file into a numpy array (uint8 data only)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: size mismatch")
    return data.reshape(dims).copy()


def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(DATA_DIR / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(DATA_DIR / f"{split}-labels-idx1-ubyte.gz")
    return images[:, None, :, :], labels.astype(np.int64)  # [N,1,28,28] uint8, [N]


def make_test_subset(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First PER_CLASS images of every class, in original file order."""
    keep = np.zeros(len(labels), dtype=bool)
    for c in range(10):
        keep[np.flatnonzero(labels == c)[:PER_CLASS]] = True
    idx = np.flatnonzero(keep)
    assert len(idx) == 10 * PER_CLASS
    return images[idx], labels[idx]


def to_float(images_u8: np.ndarray) -> np.ndarray:
    return images_u8.astype(np.float32) / 255.0


def write_data_license(path: Path) -> None:
    text = COPYRIGHT_FILE.read_text(encoding="utf-8")
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    holder = "2017, Zalando SE"
    licence_lines: list[str] = []
    for p in paragraphs:
        fields = p.splitlines()
        if fields and fields[0].strip() == "Files: *":
            for line in fields:
                if line.startswith("Copyright:"):
                    holder = line.split(":", 1)[1].strip()
        if (
            fields
            and fields[0].startswith("License:")
            and len(fields) > 1
            and not any(line.startswith("Files:") for line in fields)
        ):
            for line in fields[1:]:
                line = line[1:] if line.startswith(" ") else line
                licence_lines.append("" if line.strip() == "." else line.rstrip())
    classes = "\n".join(f"| {i} | {n} |" for i, n in enumerate(CLASS_NAMES))
    path.write_text(
        f"""# Fashion-MNIST test subset

`test_subset.npz` holds 2,000 greyscale 28x28 images of clothing articles and
their labels, a subset of the Fashion-MNIST **test** set (t10k, 10,000 images):
for each of the 10 classes, the first {PER_CLASS} images of that class in file order,
kept in their original file order.

- `images`: uint8, shape [2000, 1, 28, 28] (0 = background, 255 = foreground)
- `labels`: int64, shape [2000], values 0..9

The data was taken from the Debian package `dataset-fashion-mnist`
(`/usr/share/datasets/fashion-mnist/t10k-{{images-idx3,labels-idx1}}-ubyte.gz`),
which packages Fashion-MNIST by Zalando Research
(https://github.com/zalandoresearch/fashion-mnist), and was written by
`demo/fashion_mnist/make_demo.py`.

## Classes

| label | name |
|---|---|
{classes}

## Licence

Fashion-MNIST is released under the MIT (Expat) licence.

Copyright: {holder}

```
{chr(10).join(licence_lines).strip()}
```
""",
        encoding="utf-8",
    )


# ----------------------------------------------------------------------- metrics
def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int = 10) -> float:
    f1s = []
    for c in range(n_classes):
        tp = np.sum((y_pred == c) & (y_true == c))
        fp = np.sum((y_pred == c) & (y_true != c))
        fn = np.sum((y_pred != c) & (y_true == c))
        denom = 2 * tp + fp + fn
        f1s.append(0.0 if denom == 0 else 2.0 * tp / denom)
    return float(np.mean(f1s))


def scores(logits: np.ndarray, labels: np.ndarray) -> dict:
    pred = logits.argmax(axis=1)
    return {
        "accuracy": round(float(np.mean(pred == labels)), 4),
        "macro_f1": round(macro_f1(labels, pred), 4),
    }


# ---------------------------------------------------------------------- training
def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int) -> tuple[float, float]:
    """Train in place; returns (wall time, process CPU time) in seconds."""
    gen = torch.Generator().manual_seed(seed)
    n = len(x)
    steps_per_epoch = n // BATCH_SIZE  # drop the last incomplete batch
    opt = torch.optim.AdamW(model.parameters(), lr=MAX_LR, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=MAX_LR, epochs=epochs, steps_per_epoch=steps_per_epoch, pct_start=0.25
    )
    t0, c0 = time.perf_counter(), time.process_time()
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(n, generator=gen)
        flip = torch.rand(n, generator=gen) < 0.5  # random horizontal flip
        total, correct, loss_sum = 0, 0, 0.0
        for s in range(steps_per_epoch):
            idx = perm[s * BATCH_SIZE : (s + 1) * BATCH_SIZE]
            xb, yb = x[idx], y[idx]
            fb = flip[idx]
            xb = torch.where(fb[:, None, None, None], xb.flip(-1), xb)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            total += len(yb)
        print(
            f"epoch {epoch + 1}/{epochs}: loss {loss_sum / total:.4f} "
            f"train-acc {correct / total:.4f} ({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )
    return time.perf_counter() - t0, time.process_time() - c0


@torch.no_grad()
def torch_logits(model: torch.nn.Module, x: np.ndarray, batch: int = 500) -> np.ndarray:
    model.eval()
    return np.concatenate([model(torch.from_numpy(x[i : i + batch])).numpy() for i in range(0, len(x), batch)])


# -------------------------------------------------------------------------- ONNX
def export_fp32(model: torch.nn.Module, path: Path) -> None:
    """Export with the TorchScript ("legacy", dynamo=False) exporter.

    In torch 2.13 it emits opset 17 natively, folds BatchNorm into Conv, uses a
    Flatten op (no shape constant) and names nodes/tensors after the module
    hierarchy (e.g. /features/block1/conv/Conv). The dynamo exporter also works
    but only implements opset >= 18 (17 needs a down-conversion pass) and names
    tensors getitem/relu_1/..., see README.md.
    """
    import warnings

    import onnx

    model.eval()
    dummy = torch.zeros(2, 1, 28, 28)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,
            export_params=True,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )
    m = onnx.load(str(path))
    rename_folded_initializers(m)
    m.doc_string = (
        "FashionCNN (Fashion-MNIST). input: float32 [batch,1,28,28] in [0,1] (x/255); output: logits [batch,10]."
    )
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))  # small model -> single file, no external data


def rename_folded_initializers(m) -> None:
    """Give the auto-named (onnx::Conv_NN) BN-folded conv weights meaningful names."""
    rename: dict[str, str] = {}
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        # '/features/block1/conv/Conv' -> 'features.block1.conv'
        scope = ".".join(p for p in node.name.split("/")[1:-1])
        for role, name in zip(("weight", "bias"), list(node.input)[1:]):
            if name.startswith("onnx::"):
                rename[name] = f"{scope}.{role}_bnfolded"
    if any(n.op_type == "Identity" for n in m.graph.node):
        raise RuntimeError("unexpected Identity node in exported graph (shared initializer)")
    rename_initializers(m, rename)


INT8_EXTRA_OPTIONS = {
    "ActivationSymmetric": True,  # zero point 0 for activations (TensorRT requirement)
    "WeightSymmetric": True,  # zero point 0 for weights (TensorRT requirement)
    # TensorRT's ONNX parser rejects DequantizeLinear on int32 biases
    # ("only activation types allowed as input to this layer"): keep biases float.
    "QuantizeBias": False,
    # TensorRT's recommended Q/DQ placement: quantize the inputs of Conv/Gemm,
    # not their outputs (TensorRT fuses Conv/Gemm + bias + ReLU itself). This also
    # keeps the final logits in float instead of passing them through an int8 Q/DQ.
    "OpTypesToExcludeOutputQuantization": ["Conv", "Gemm"],
}


def ort_logits(sess, x: np.ndarray, batch: int = 500) -> np.ndarray:
    return np.concatenate(
        [sess.run(["logits"], {"input": x[i : i + batch]})[0] for i in range(0, len(x), batch)]
    ).astype(np.float32)


# -------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=4, help="training epochs (default 4, ~2-2.5 min on 2 cores)")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: this script's folder)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch and ORT (default 2)")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort

    out: Path = args.out.resolve()
    (out / "data").mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    seed_everything(SEED, args.threads)

    # data
    train_u8, train_y = load_split("train")
    test_u8, test_y = load_split("t10k")
    sub_u8, sub_y = make_test_subset(test_u8, test_y)
    np.savez_compressed(out / "data" / "test_subset.npz", images=sub_u8, labels=sub_y)
    write_data_license(out / "data" / "LICENSE.md")
    x_train = torch.from_numpy(to_float(train_u8))
    y_train = torch.from_numpy(train_y)
    x_sub = to_float(sub_u8)
    print(f"train {tuple(x_train.shape)}, test subset {x_sub.shape}", flush=True)

    # train + save
    model = fmnist_model.build()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"FashionCNN: {n_params} parameters", flush=True)
    train_s, train_cpu_s = train(model, x_train, y_train, args.epochs, SEED)
    model.eval()
    torch.save(model.state_dict(), out / PT_FILE)

    # reload exactly as a user would, then export/convert
    model = fmnist_model.build()
    model.load_state_dict(torch.load(out / PT_FILE, weights_only=True))
    model.eval()
    export_fp32(model, out / FP32_FILE)
    make_fp16(out / FP32_FILE, out / FP16_FILE)
    make_int8_qdq(
        out / FP32_FILE,
        out / INT8_FILE,
        to_float(train_u8[:N_CALIB]),
        input_name="input",
        extra_options=INT8_EXTRA_OPTIONS,
    )

    # smoke test: batch 1 and batch 32, float32 input
    sessions = {
        "ort_fp32": ort_session(out / FP32_FILE, args.threads),
        "ort_fp16": ort_session(out / FP16_FILE, args.threads),
        "ort_int8_qdq": ort_session(out / INT8_FILE, args.threads),
    }
    for name, sess in sessions.items():
        for b in (1, 32):
            y = sess.run(["logits"], {"input": x_sub[:b]})[0]
            assert y.shape == (b, 10) and y.dtype == np.float32, (name, b, y.shape, y.dtype)

    # evaluate
    ref = torch_logits(model, x_sub)
    results = {"pytorch": scores(ref, sub_y)}
    for name, sess in sessions.items():
        lg = ort_logits(sess, x_sub)
        r = scores(lg, sub_y)
        r["max_abs_logit_diff_vs_pytorch"] = float(f"{np.abs(lg - ref).max():.3g}")
        r["top1_agreement_vs_pytorch"] = round(float(np.mean(lg.argmax(1) == ref.argmax(1))), 4)
        results[name] = r
    for k, v in results.items():
        print(f"{k:14s} {v}")

    fp32_nodes = onnx.load(str(out / FP32_FILE)).graph.node
    metrics = {
        "dataset": "Fashion-MNIST test subset (data/test_subset.npz, 2000 images, 200/class)",
        "results": results,
        "parameters": n_params,
        "epochs": args.epochs,
        "batch_size": BATCH_SIZE,
        "train_wall_time_s": round(train_s, 1),
        "train_cpu_time_s": round(train_cpu_s, 1),
        "total_wall_time_s": round(time.perf_counter() - t_start, 1),
        "threads": args.threads,
        "seed": SEED,
        "onnx_opset": OPSET,
        "onnx_exporter": "torch.onnx.export(dynamo=False) (TorchScript-based)",
        "fp32_graph": {
            "nodes": len(fp32_nodes),
            "op_types": sorted({n.op_type for n in fp32_nodes}),
        },
        "int8": {
            "calibration_images": f"first {N_CALIB} training images",
            "calibration_method": "MinMax",
            "format": "QDQ; QInt8 symmetric activations; QInt8 symmetric per-channel weights",
            "extra_options": INT8_EXTRA_OPTIONS,
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
        },
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    print(f"wrote artefacts to {out} in {metrics['total_wall_time_s']}s")


if __name__ == "__main__":
    main()
