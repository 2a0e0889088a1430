"""A tiny BERT made as users make theirs: Hugging Face `transformers` BertModel (random weights from a small
config), exported by `torch.onnx.export` with its defaults and the dynamic axes a user names.

    /work/main/.venv/bin/python tests/data/bert/make_bert.py   (needs torch and transformers; tests need neither)

Inputs `input_ids` and `attention_mask` (int64, [batch, seq]: they share both dimensions), output
`last_hidden_state`. Made with torch 2.13.0+cpu, transformers 5.24.0, onnx 1.23.2; the versions are written to
PROVENANCE.txt beside the model.
"""

from pathlib import Path

import onnx
import torch
import transformers
from transformers import BertConfig, BertModel

HERE = Path(__file__).resolve().parent


class Wrapped(torch.nn.Module):
    """The model's first output, as a tensor (BertModel returns a ModelOutput)."""

    def __init__(self, bert: BertModel):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def main() -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = Wrapped(BertModel(config)).eval()
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    path = HERE / "bert_tiny.onnx"
    torch.onnx.export(
        model,
        (ids, mask),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"},
        },
    )
    onnx.save(onnx.load(str(path)), str(path))  # one file: the exporter may write weights beside it
    path.with_name(path.name + ".data").unlink(missing_ok=True)
    (HERE / "PROVENANCE.txt").write_text(
        "bert_tiny.onnx: made by tests/data/bert/make_bert.py\n"
        f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}\n"
        "command: /work/main/.venv/bin/python tests/data/bert/make_bert.py\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
