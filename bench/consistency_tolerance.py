"""How far a row's outputs move when only the batch around it changes: the figures behind the tolerances of the
captured candidates' consistency checks (docs/captured.md#captures-against-each-other-and-consistency).

TensorRT picks a kernel (tactic) per input shape, so a batch of 4 runs other kernels than a batch of 1, with another
order of accumulation; cuDNN with `benchmark=True` and cuBLAS do the same per shape (timed choice among algorithms),
so PyTorch CUDA on real torchvision models is this script's stand-in for TensorRT's batch-size tactic changes (no
TensorRT on the machine it ran on).

For each model and precision (FP32 with TF32 off, FP32 with TF32 on as TensorRT builds FP32 engines by default, FP16,
BF16) it measures, on the model's output:
- repeated: rel_l2 of each row of a batch of N copies of one row against that row run alone (N = 4, 8, 32), the worst;
- duplicated: rel_l2 and max |diff| between two equal rows of one batch of 8 otherwise random rows;
- determinism: the largest |diff| between two runs of one batch.

Models: torchvision's defaults (random weights: nothing downloaded there), eval mode, cudnn.benchmark on.
Run on the GPU machine (torch 2.11.0+cu130, torchvision 0.26.0, one H200), this file (ruff-formatted since),
shipped compressed:
    python3 bench/consistency_tolerance.py bench/results/consistency_tolerance_cuda.json
Needs torch with CUDA and torchvision (tests never import this script).
"""

import json
import sys
import time

import numpy as np
import torch
import torchvision as tv


def r(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


M = {
    "resnet18": tv.models.resnet18,
    "mobilenet_v3_small": tv.models.mobilenet_v3_small,
    "efficientnet_b0": tv.models.efficientnet_b0,
    "convnext_tiny": tv.models.convnext_tiny,
    "vit_b_16": tv.models.vit_b_16,
}


def meas(run, x):
    s = run(x[:1])[0]
    o = {}
    w = 0
    for n in (4, 8, 32):
        p = run(x[:1].repeat(n, 1, 1, 1))
        w = max(w, max(r(p[k], s) for k in range(n)))
        o[f"repeated_{n}_max_abs"] = float(max(np.abs(p[k].astype(np.float64) - s).max() for k in range(n)))
    o["repeated_rel_l2"] = w
    b = x[1:9].clone()
    b[3] = b[0]
    d = run(b)
    o["duplicated_rel_l2"] = r(d[3], d[0])
    o["duplicated_max_abs"] = float(np.abs(d[3].astype(np.float64) - d[0]).max())
    o["determinism_max_abs"] = float(np.abs(run(b).astype(np.float64) - d).max())
    return o


R = {"torch": torch.__version__, "torchvision": tv.__version__, "gpu": torch.cuda.get_device_name(0)}
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
x = torch.rand(9, 3, 224, 224, device="cuda")
for nm, mk in M.items():
    torch.manual_seed(1)
    model = mk().eval().cuda()
    for pr in ("fp32", "tf32", "fp16", "bf16"):
        torch.backends.cuda.matmul.allow_tf32 = pr == "tf32"
        torch.backends.cudnn.allow_tf32 = pr == "tf32"
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(pr, torch.float32)
        m = model.to(dt)

        def run(t, m=m, dt=dt):
            with torch.no_grad():
                return m(t.to(dt)).float().cpu().numpy()

        t0 = time.perf_counter()
        R[f"cuda/{nm}/{pr}"] = meas(run, x) | {"s": time.perf_counter() - t0}
        print(nm, pr, R[f"cuda/{nm}/{pr}"], flush=True)
json.dump(R, open(sys.argv[1], "w"), indent=1)
