"""ONNX export of any policy with a ``ModuleSpec``, and parity against torch in onnxruntime."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .parity import ParityReport, Runner, compare_once, verify
from .spec import ModuleSpec, module_spec, tracing_mode

OPSET = 17


def export_module_onnx(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], path: str | Path,
                       input_names: list[str], output_names: list[str], dynamic_batch: bool = True,
                       metadata: dict[str, str] | None = None, opset: int = OPSET) -> Path:
    """Export ``module(*example_inputs)`` to an ONNX file (written atomically).

    Axis 0 of every input and output is the symbolic ``batch`` axis when ``dynamic_batch``.
    ``metadata`` goes into the model's ``metadata_props``. Uses torch's TorchScript-based exporter
    (no ``onnxscript`` needed); the graph is checked with ``onnx.checker``.
    """
    import onnx

    path = Path(path)
    if len(example_inputs) != len(input_names):
        raise ValueError(f"{len(example_inputs)} example inputs but {len(input_names)} input names")
    axes = {n: {0: "batch"} for n in (*input_names, *output_names)} if dynamic_batch else None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with tracing_mode(module):
            torch.onnx.export(module, tuple(example_inputs), tmp, dynamo=False, input_names=list(input_names),
                              output_names=list(output_names), dynamic_axes=axes, opset_version=opset)
        model = onnx.load(tmp)
        for k, v in sorted((metadata or {}).items()):
            model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=str(v)))
        model.producer_name = "robo"
        onnx.checker.check_model(model)
        onnx.save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def export_spec_onnx(spec: ModuleSpec, path: str | Path) -> Path:
    """Export a ``ModuleSpec`` (its names, dynamic batch and metadata) to ONNX."""
    return export_module_onnx(spec.module, tuple(spec.inputs.values()), path, list(spec.inputs), spec.outputs,
                              spec.dynamic_batch, spec.metadata)


def export_onnx(policy, path: str | Path) -> Path:
    """Export a robo policy to ONNX, as its family's ``ModuleSpec`` says (see ``hardware.export.spec``)."""
    return export_spec_onnx(module_spec(policy), path)


def onnx_runner(onnx_path: str | Path) -> Runner:
    """A ``Runner`` over an onnxruntime CPU ``InferenceSession`` of ``onnx_path`` (one thread)."""
    import onnxruntime as ort

    if not Path(onnx_path).is_file():
        raise FileNotFoundError(f"ONNX file not found: {onnx_path}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    ort_session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    return lambda inputs: [np.asarray(o) for o in ort_session.run(None, inputs)]


def check_onnx_parity(module: nn.Module | ModuleSpec, onnx_path: str | Path, inputs: dict[str, torch.Tensor],
                      atol: float = 1e-5) -> ParityReport:
    """Run ``module`` (or a spec's module) in torch and ``onnx_path`` in onnxruntime on the same named inputs.

    A bare module's outputs are named by the ONNX graph's outputs."""
    runner = onnx_runner(onnx_path)
    if not isinstance(module, ModuleSpec):
        import onnx

        names = [o.name for o in onnx.load(str(onnx_path)).graph.output]
        module = ModuleSpec(module, dict(inputs), names)
    return compare_once(module, runner, inputs, atol)


def verify_onnx(spec: ModuleSpec, onnx_path: str | Path, atol: float = 1e-5, batch_size: int = 8,
                steps: int = 100, seed: int = 0) -> ParityReport:
    """Random-batch parity plus, for recurrent specs, a ``steps``-step rollout carrying the state."""
    return verify(spec, onnx_runner(onnx_path), atol, batch_size, steps, seed)
