"""Every registered backend keeps the one base class: lifecycle, declared capabilities, from_config."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import TINY
from trtverify.backends.base import Backend, Capabilities, candidate_backend
from trtverify.config.backends import Backends
from trtverify.config.registry import BACKENDS
from trtverify.util.errors import UsageError


@pytest.mark.parametrize("name", BACKENDS.names())
def test_registered_backends_declare_what_they_can_do(name: str):
    entry = BACKENDS.get(name)
    cls = entry.load()  # imports no backend library: those load in load()
    assert issubclass(cls, Backend) and cls.name == name
    assert isinstance(cls.capabilities, Capabilities)
    # a backend runs candidate ONNX models exactly when it says how to build itself from the suite
    assert (cls.from_config.__func__ is not Backend.from_config.__func__) == entry.runs_candidates


def test_lifecycle_as_a_context_manager():
    b = candidate_backend("onnxruntime", TINY / "tiny.onnx", Backends())
    assert b.capabilities.onnx_graph and b.capabilities.exposes_intermediates and b.capabilities.casts_feeds
    x = np.zeros((2, 1, 8, 8), np.float32)
    with b:
        assert [m.name for m in b.inputs()] == ["input"]
        first = b.infer({"input": x})["logits"]
        b.release()  # frees the session; the next run makes a new one
        assert np.array_equal(b.infer({"input": x})["logits"], first)
        assert b.graph().info.value_tensors()
    assert b._session is None  # closed on leaving the block


def test_a_backend_that_cannot_run_candidates_says_so():
    with pytest.raises(UsageError, match="cannot run candidate ONNX models"):
        candidate_backend("torch", TINY / "tiny.onnx", Backends())
