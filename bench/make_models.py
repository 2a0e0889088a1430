"""Build the two benchmark models, FP32 reference and FP16 candidate, into bench/.cache/.

Deterministic: seeded random weights, nothing downloaded, no torchvision.

  cnn_fp32.onnx / cnn_fp16.onnx          ResNet-50 (bottlenecks [3,4,6,3], widths 64..2048),
                                         input `input` [1,3,224,224], output `logits` [1,1000];
                                         BatchNorm folded into Conv by the exporter (eval mode).
  encoder_fp32.onnx / encoder_fp16.onnx  6-layer BERT-shaped post-LN encoder (hidden 384, 6 heads,
                                         FFN 1536, erf GELU, LayerNorm), each layer its own weights,
                                         input `hidden` float32 [1,128,384], output `output`.

FP16 candidates: onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True),
nodes re-sorted topologically if the converter left them out of order.

Usage: python bench/make_models.py [--force] [--out DIR]
Files that already exist are kept (use --force to rebuild).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / ".cache"
OPSET = 17
SEED = 0

MODELS = {
    # name: (input name, input shape, output name)
    "cnn": ("input", (1, 3, 224, 224), "logits"),
    "encoder": ("hidden", (1, 128, 384), "output"),
}


# --------------------------------------------------------------------------------------------
# ResNet-50 in plain torch
# --------------------------------------------------------------------------------------------


def _resnet50():
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin: int, width: int, stride: int):
            super().__init__()
            cout = width * self.expansion
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet50(nn.Module):
        def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            stages = []
            cin = 64
            for i, (n, width) in enumerate(zip(layers, (64, 128, 256, 512))):
                blocks = []
                for j in range(n):
                    stride = 2 if (i > 0 and j == 0) else 1
                    blocks.append(Bottleneck(cin, width, stride))
                    cin = width * Bottleneck.expansion
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, num_classes)  # cin == 2048

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    model = ResNet50()
    # Trained-looking statistics so activations stay in a sane range through 50 layers
    # (and inside FP16's range): He-init convs, non-trivial BatchNorm running stats,
    # small gamma on each block's last BN (as in zero-init-residual training recipes).
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
            elif isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                last = name.endswith("bn3") or name.endswith("downsample.1")
                scale = 0.2 if last else 1.0
                m.weight.copy_(scale * (0.75 + 0.5 * torch.rand(c, generator=g)))
                m.bias.copy_(0.1 * torch.randn(c, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
            elif isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(0.01 * torch.randn(m.bias.shape, generator=g))
    return model.eval()


# --------------------------------------------------------------------------------------------
# BERT-shaped encoder in plain torch
# --------------------------------------------------------------------------------------------


def _encoder(layers=6, hidden=384, heads=6, ffn=1536):
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = heads
            self.head_dim = hidden // heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.dense = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, x):
            # HF-BERT style: shapes taken from the tensor, so the graph carries its shape arithmetic
            b, s = x.size(0), x.size(1)
            return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

        def forward(self, x):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = torch.softmax(scores, dim=-1)
            ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
            ctx = ctx.view(ctx.size(0), ctx.size(1), hidden)
            return self.norm(self.dense(ctx) + x)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = SelfAttention()
            self.intermediate = nn.Linear(hidden, ffn)
            self.output = nn.Linear(ffn, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x):
            a = self.attention(x)
            h = self.output(nn.functional.gelu(self.intermediate(a)))  # exact (erf) GELU
            return self.norm(h + a)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, hidden_states):
            for layer in self.layers:
                hidden_states = layer(hidden_states)
            return hidden_states

    model = Encoder()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(
                m, nn.Linear
            ):  # BERT's initializer_range 0.02 would make attention trivial; use 1/sqrt(fan_in)
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(0.02 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.05 * torch.randn(m.bias.shape, generator=g))
    return model.eval()


# --------------------------------------------------------------------------------------------
# export, FP16 conversion, counts
# --------------------------------------------------------------------------------------------


def _export(
    model, input_name: str, shape: tuple[int, ...], output_name: str, path: Path, dynamic: dict | None = None
) -> None:
    """Export with torch.onnx (TorchScript exporter). With `dynamic` ({axis: name}), the graph is
    exported with those axes dynamic (so it keeps the HF-style Shape/Gather/Unsqueeze/Concat shape
    arithmetic of a real BERT export) and then the input and output are pinned back to `shape`,
    so any tool that generates inputs from the model's signature makes exactly `shape`."""
    import onnx
    import torch

    torch.manual_seed(SEED)
    example = torch.randn(*shape)
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        # dynamo=False is deliberate (the brief's exporter); silence its deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (example,),
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=[input_name],
            output_names=[output_name],
            do_constant_folding=True,  # folds eval-mode BatchNorm into the preceding Conv
            training=torch.onnx.TrainingMode.EVAL,
            dynamic_axes={input_name: dynamic, output_name: dynamic} if dynamic else None,
        )
    if dynamic:
        m = onnx.load(str(tmp))
        for vi in list(m.graph.input) + list(m.graph.output):
            for dim, size in zip(vi.type.tensor_type.shape.dim, shape):
                dim.Clear()
                dim.dim_value = size
        del m.graph.value_info[:]
        m = onnx.shape_inference.infer_shapes(m)
        onnx.checker.check_model(m)
        onnx.save(m, str(tmp))
    tmp.replace(path)


def _toposort(model) -> bool:
    """Re-order graph nodes topologically in place; returns True if the order changed."""
    graph = model.graph
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    nodes = list(graph.node)
    ordered, pending = [], nodes
    while pending:
        rest = []
        for node in pending:
            if all(i in available for i in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise RuntimeError(f"graph has a cycle or a dangling input near node {rest[0].name!r}")
        pending = rest
    changed = [n.name for n in ordered] != [n.name for n in nodes]
    if changed:
        del graph.node[:]
        graph.node.extend(ordered)
    return changed


def _to_fp16(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    fp16 = convert_float_to_float16(model, keep_io_types=True)
    try:
        onnx.checker.check_model(fp16)
    except onnx.checker.ValidationError:
        if not _toposort(fp16):
            raise
        print(f"  {dst.name}: nodes re-sorted topologically", file=sys.stderr)
        onnx.checker.check_model(fp16)
    tmp = dst.with_suffix(".tmp.onnx")
    onnx.save(fp16, str(tmp))
    tmp.replace(dst)


def tensor_counts(path: Path) -> dict:
    """Node count, node-output count (what 'mark all' marks: outputs of non-Constant nodes), op histogram."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    nodes = list(model.graph.node)
    outs = [o for n in nodes if n.op_type != "Constant" for o in n.output if o]
    return {
        "nodes": len(nodes),
        "tensors": len(dict.fromkeys(outs)),
        "ops": dict(Counter(n.op_type for n in nodes).most_common()),
    }


def build(out: Path, force: bool = False, names=tuple(MODELS)) -> dict[str, dict[str, Path]]:
    out.mkdir(parents=True, exist_ok=True)
    built: dict[str, dict[str, Path]] = {}
    for name in names:
        input_name, shape, output_name = MODELS[name]
        ref, cand = out / f"{name}_fp32.onnx", out / f"{name}_fp16.onnx"
        t0 = time.perf_counter()
        did = []
        if force or not ref.exists():
            import torch

            torch.manual_seed(SEED)
            if name == "cnn":
                _export(_resnet50(), input_name, shape, output_name, ref)
            else:
                _export(_encoder(), input_name, shape, output_name, ref, dynamic={0: "batch", 1: "sequence"})
            did.append("fp32")
        if force or did or not cand.exists():
            _to_fp16(ref, cand)
            did.append("fp16")
        dt = time.perf_counter() - t0
        built[name] = {"ref": ref, "cand": cand}
        for tag, path in (("fp32", ref), ("fp16", cand)):
            c = tensor_counts(path)
            ops = ", ".join(f"{k} {v}" for k, v in c["ops"].items())
            state = "built" if tag in did else "cached"
            print(
                f"{path.name:<20} {state:<6} {path.stat().st_size / 2**20:7.1f} MB  nodes {c['nodes']:4d}  tensors "
                f"{c['tensors']:4d}  [{ops}]"
            )
        if did:
            print(f"  {name}: {dt:.1f} s")
    return built


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder [default: bench/.cache]")
    ap.add_argument("--force", action="store_true", help="rebuild even if the files exist")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    args = ap.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    t0 = time.perf_counter()
    build(args.out, args.force, names)
    print(f"done in {time.perf_counter() - t0:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
