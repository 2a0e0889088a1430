"""A tiny Hugging Face BERT with an attention mask, exported the way users export theirs.

Run: python tests/data/bert_mask/make_bert.py (needs torch and transformers; the tests need neither).

The model: transformers' BertModel built from a BertConfig (random weights, torch seed 0, no download):
vocab 100, hidden 32, 2 layers, 2 heads, FFN 64, 32 positions. Inputs input_ids and attention_mask
(int64, [batch, 16]); output last_hidden_state. Two exports of the same module:
- bert_ts.onnx: torch.onnx.export(..., dynamo=False), opset 17 (TorchScript);
- bert_dynamo.onnx: torch.onnx.export(...) with torch 2.13's defaults (dynamo).
inputs.npz: 4 rows of token ids with real padding (attention_mask zeros at the end of rows 1-3).
"""

from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertModel

HERE = Path(__file__).resolve().parent
SEQ = 16


def model() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return BertModel(config, add_pooling_layer=False).eval()


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 100, size=(4, SEQ), dtype=np.int64)
    mask = np.ones((4, SEQ), dtype=np.int64)
    for row, length in enumerate((SEQ, 11, 7, 3)):  # real padding: the mask is 0 past each row's length
        mask[row, length:] = 0
        ids[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask}


class Wrapped(torch.nn.Module):
    """last_hidden_state as a plain tensor (the user's usual wrapper around a ModelOutput)."""

    def __init__(self, bert: BertModel):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def main() -> None:
    bert = Wrapped(model()).eval()
    feed = inputs()
    np.savez(HERE / "inputs.npz", **feed)
    args = (torch.from_numpy(feed["input_ids"][:2]), torch.from_numpy(feed["attention_mask"][:2]))
    names = {"input_names": ["input_ids", "attention_mask"], "output_names": ["last_hidden_state"]}
    torch.onnx.export(
        bert,
        args,
        str(HERE / "bert_ts.onnx"),
        dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "last_hidden_state": {0: "batch"}},
        opset_version=17,
        dynamo=False,
        **names,
    )
    batch = torch.export.Dim("batch")
    torch.onnx.export(
        bert,
        args,
        str(HERE / "bert_dynamo.onnx"),
        dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}},
        external_data=False,
        **names,
    )


if __name__ == "__main__":
    main()
