"""Export robo policies for deployment: ONNX, TorchScript and C99 for microcontrollers.

    from hardware.export import export_onnx, verify_onnx, module_spec, export_c, verify_c
    export_onnx(policy, "policy.onnx")                       # any kind with a registered ModuleSpec
    report = verify_onnx(module_spec(policy), "policy.onnx")  # max |onnxruntime - torch|
    sources = export_c(policy, "c/")                          # MLP, GRU, diffusion (MLP denoiser), energy (MLP),
    report = verify_c(policy, sources, steps=500)             # steered; gcc-compiled rollout vs torch
    from hardware.export.mcu import MCUS, mcu_size, mcu_rollout   # flash, RAM, instructions a step on a Cortex-M
"""

from . import chunked  # noqa: F401  (registers the diffusion / energy / implicit-BC specs)
from .c_build import c_rollout, export_c, object_size, time_c_step, verify_c
from .c_codegen import CSources, generate_c
from .cgraph import CGraph, c_exportable_kinds, c_graph, register_c_graph
from .onnx_export import (check_onnx_parity, export_module_onnx, export_onnx, export_spec_onnx, onnx_runner,
                          verify_onnx)
from .parity import ParityReport, observation_sequence, reference_rollout, verify
from .spec import ModuleSpec, denoiser_spec, exportable_kinds, module_spec, register_module_spec
from .torchscript import export_spec_torchscript, export_torchscript, torchscript_runner, verify_torchscript

__all__ = [
    "CGraph", "CSources", "ModuleSpec", "ParityReport", "c_exportable_kinds", "c_graph", "c_rollout",
    "check_onnx_parity", "denoiser_spec", "export_c", "export_module_onnx", "export_onnx", "export_spec_onnx",
    "export_spec_torchscript", "export_torchscript", "exportable_kinds", "generate_c", "module_spec",
    "object_size", "observation_sequence", "onnx_runner", "reference_rollout", "register_c_graph",
    "register_module_spec", "time_c_step", "torchscript_runner", "verify", "verify_c", "verify_onnx",
    "verify_torchscript",
]
