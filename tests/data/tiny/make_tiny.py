"""Regenerate the committed test models: python tests/data/tiny/make_tiny.py (needs torch)."""

from pathlib import Path

import torch
from tinymodel import build, build_two_heads

HERE = Path(__file__).resolve().parent


def export(model: torch.nn.Module, path: Path, outputs: list[str]) -> None:
    dyn = {"input": {0: "batch"}, **{o: {0: "batch"} for o in outputs}}
    # the TorchScript exporter keeps this graph small and its names stable
    torch.onnx.export(
        model,
        (torch.rand(2, 1, 8, 8),),
        str(path),
        input_names=["input"],
        output_names=outputs,
        dynamic_axes=dyn,
        opset_version=17,
        dynamo=False,
    )


def main() -> None:
    model = build().eval()
    torch.save(model.state_dict(), HERE / "tiny.pt")
    export(model, HERE / "tiny.onnx", ["logits"])
    two = build_two_heads().eval()
    export(two, HERE / "two_heads.onnx", ["logits", "features"])
    torch.jit.save(torch.jit.trace(model, torch.rand(2, 1, 8, 8)), str(HERE / "tiny_script.pt"))
    torch.export.save(torch.export.export(model, (torch.rand(2, 1, 8, 8),)), str(HERE / "tiny_exported.pt2"))


if __name__ == "__main__":
    main()
