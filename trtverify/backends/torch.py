"""PyTorch backend: eval mode, no grad, CPU or CUDA."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, Capabilities
from trtverify.config.backends import TorchOptions
from trtverify.config.models import PyTorchModel
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.util import native
from trtverify.util.deps import require
from trtverify.util.errors import BackendError, MissingDependency, UsageError
from trtverify.util.hooks import load_hook


class TorchBackend(Backend):
    """The PyTorch model (stage framework); `expose` captures submodule outputs by module path."""

    name = "torch"
    capabilities = Capabilities(exposes_intermediates=True, onnx_graph=False, casts_feeds=False)

    def __init__(
        self,
        spec: PyTorchModel,
        options: TorchOptions | None = None,
        *,
        search_path: Sequence[Path] = (),
        default_input_names: Sequence[str] = (),
    ):
        super().__init__()
        self.spec = spec
        self.options = options or TorchOptions()
        self.search_path = list(search_path)
        self.input_names = list(spec.input_names or default_input_names)
        self._model: Any = None
        self._torch: Any = None
        self._captured: dict[str, Any] = {}
        self._hooks: list[Any] = []
        what = str(spec.factory or spec.torchscript or spec.exported)
        self._forward = native.Operation(  # entered around every forward (about a microsecond)
            f"running the PyTorch model ({what}) on {self.options.device}", key=f"torch-forward:{what}"
        )

    def load(self) -> None:
        torch = self._torch = require("torch", "the torch backend (stage 'framework')")
        device = self.options.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise MissingDependency(
                f"backends.torch.device is '{device}' but this torch ({torch.__version__}) sees no CUDA GPU",
                "run on a machine with a CUDA GPU and a CUDA build of torch, or set backends.torch.device: cpu",
            )
        spec = self.spec
        try:
            if spec.factory:
                try:
                    factory = load_hook(spec.factory, self.search_path, what="models.pytorch.factory")
                except ModuleNotFoundError as exc:
                    raise MissingDependency(
                        f"models.pytorch.factory '{spec.factory}' imports '{exc.name}', which is not installed",
                        f"pip install {exc.name}",
                    ) from exc
                model = factory(**spec.kwargs)
                if not isinstance(model, torch.nn.Module):
                    raise UsageError(
                        f"models.pytorch.factory '{spec.factory}' returned {type(model).__name__}, expected a "
                        "torch.nn.Module"
                    )
                if spec.weights is not None:
                    state = torch.load(str(spec.weights), map_location="cpu", weights_only=True)
                    if not isinstance(state, dict):
                        raise UsageError(
                            f"{spec.weights}: expected a state_dict (a mapping of tensors), got {type(state).__name__}"
                        )
                    result = model.load_state_dict(state, strict=True)
                    del result
            elif spec.torchscript:
                model = torch.jit.load(str(spec.torchscript), map_location="cpu")
            else:
                model = torch.export.load(str(spec.exported)).module()
        except (UsageError, MissingDependency):
            raise
        except RuntimeError as exc:
            raise BackendError(f"PyTorch could not load the model: {exc}") from exc
        if hasattr(model, "eval") and not isinstance(model, torch.fx.GraphModule):
            model.eval()
        self._model = model.to(device)

    def inputs(self) -> list[TensorMeta]:
        return [TensorMeta(n, "unknown", None) for n in self.input_names]

    def outputs(self) -> list[TensorMeta]:
        return [TensorMeta(n, "unknown", None) for n in (self.spec.output_names or [])]

    def _named(self, out: Any) -> dict[str, Any]:
        torch = self._torch
        names = self.spec.output_names
        if isinstance(out, dict):
            return dict(out)
        seq = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if seq is None:
            raise BackendError(
                f"the PyTorch model returned {type(out).__name__}; expected a tensor, a tuple/list of tensors or a dict"
            )
        if names is None:
            raise UsageError(
                f"the PyTorch model returns {len(seq)} unnamed tensor(s): name them with models.pytorch.output_names "
                "(the ONNX output names, in the order forward() returns them)"
            )
        if len(names) != len(seq):
            raise UsageError(
                f"models.pytorch.output_names has {len(names)} name(s) but the model returned {len(seq)} tensor(s)"
            )
        return dict(zip(names, seq))

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._model is None:
            self.load()
        torch = self._torch
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise UsageError(f"the feed lacks {', '.join(missing)} (torch input order: {', '.join(self.input_names)})")
        args = [torch.from_numpy(np.ascontiguousarray(feed[n])).to(self.options.device) for n in self.input_names]
        self._captured.clear()
        with torch.inference_mode(), self._forward:
            out = self._model(*args)
        result: dict[str, np.ndarray] = {}
        for name, value in {**self._named(out), **self._captured}.items():
            if not isinstance(value, torch.Tensor):
                raise BackendError(f"PyTorch output '{name}' is a {type(value).__name__}, not a tensor")
            result[name] = value.detach().to("cpu").contiguous().numpy()
        return result

    def intermediates(self) -> list[str]:
        if self._model is None:
            self.load()
        return [n for n, _ in self._model.named_modules() if n]

    def expose(self, names: Sequence[str]) -> list[str]:
        """Capture the tensor output of the named submodules (module paths, not ONNX names)."""
        if self._model is None:
            self.load()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        modules = dict(self._model.named_modules())
        chosen = [n for n in names if n in modules and n]

        def make(name: str) -> Any:
            def hook(_mod: Any, _inp: Any, output: Any) -> None:
                if isinstance(output, self._torch.Tensor):
                    self._captured[name] = output

            return hook

        for n in chosen:
            self._hooks.append(modules[n].register_forward_hook(make(n)))
        return chosen

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._model = None
