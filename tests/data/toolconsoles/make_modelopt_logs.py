import numpy as np
import torch


class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        s.r = torch.nn.ReLU()
        s.c2 = torch.nn.Conv2d(8, 4, 3)
        s.fc = torch.nn.Linear(4, 2)

    def forward(s, x):
        return s.fc(s.c2(s.r(s.c(x))).mean((2, 3)))


torch.manual_seed(0)
torch.onnx.export(
    M().eval(),
    (torch.randn(1, 3, 16, 16),),
    "tiny.onnx",
    input_names=["x"],
    output_names=["y"],
    dynamo=False,
    opset_version=17,
)
np.savez("calib.npz", x=np.random.RandomState(0).randn(8, 3, 16, 16).astype(np.float32))
