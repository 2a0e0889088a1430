"""A small BERT-shaped encoder for layerwise tests: python tests/data/encoder/make_encoder.py (needs torch).

2 layers, hidden 64, 4 heads, FFN 128, sequence 16; every layer has its own weights.
Exported with dynamic batch, so the graph carries Shape arithmetic (which the layerwise
stage must leave out).
"""

from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


class Layer(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.q = torch.nn.Linear(hidden, hidden)
        self.k = torch.nn.Linear(hidden, hidden)
        self.v = torch.nn.Linear(hidden, hidden)
        self.o = torch.nn.Linear(hidden, hidden)
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.ff1 = torch.nn.Linear(hidden, ffn)
        self.ff2 = torch.nn.Linear(ffn, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


class Encoder(torch.nn.Module):
    def __init__(self, layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int = 128):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


def main() -> None:
    torch.manual_seed(0)
    model = Encoder().eval()
    torch.onnx.export(
        model,
        (torch.randn(2, 16, 64),),
        str(HERE / "encoder.onnx"),
        input_names=["hidden"],
        output_names=["output"],
        dynamic_axes={"hidden": {0: "batch"}, "output": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )


if __name__ == "__main__":
    main()
