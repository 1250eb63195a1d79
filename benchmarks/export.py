"""Per-step inference time and flash size of exported policies on this machine.

Prints one markdown table: for an MLP 64-64 actor (with observation normalization) and RAPTOR's
GRU policy, the time of one control step (batch 1) as generated C (``gcc -O2``, timed inside C),
in onnxruntime (one thread, ``InferenceSession.run`` from Python) and in torch (one thread, eager, no grad);
and the flash size: weights (parameters x 4 bytes) and the compiled step object
(``gcc -Os -c``, binutils ``size``: text includes the ``static const`` weights in .rodata).

    python benchmarks/export.py
    python benchmarks/export.py --repeats 50 --c-steps 100000
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from hardware.export import (c_graph, export_onnx, generate_c, module_spec, object_size, onnx_runner,
                             time_c_step)
from policies.foundation import load_raptor
from policies.mlp import MLPConfig, MLPPolicy


def mlp_actor(seed: int = 0) -> MLPPolicy:
    """An MLP 64-64 actor (ReLU, tanh output) with random weights and normalization stats."""
    g = torch.Generator().manual_seed(seed)
    policy = MLPPolicy(MLPConfig(hidden_dims=[64, 64]))
    with torch.no_grad():
        for p in policy.model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        policy.model.obs_mean.copy_(torch.randn(policy.obs_dim, generator=g))
        policy.model.obs_std.copy_(torch.rand(policy.obs_dim, generator=g) + 0.5)
    return policy


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_per_call(fn, calls: int, repeats: int) -> float:
    """Seconds per call of ``fn``: best of ``repeats`` timed loops of ``calls`` calls."""
    for _ in range(min(calls, 200)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure(name: str, policy, args) -> dict:
    spec = module_spec(policy)
    state = spec.first_state(1)
    inputs = {k: state[k] if k in state else torch.randn(1, policy.obs_dim) for k in spec.inputs}  # spec order
    sources = generate_c(c_graph(policy))
    c_s = time_c_step(sources, args.c_steps, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        run = onnx_runner(export_onnx(policy, Path(tmp) / "p.onnx"))
        np_inputs = {k: v.numpy() for k, v in inputs.items()}
        ort_s = best_per_call(lambda: run(np_inputs), args.calls, args.repeats)
    with torch.no_grad():
        torch_s = best_per_call(lambda: spec.module(*inputs.values()), args.calls, args.repeats)
    size = object_size(sources)
    params = sum(p.numel() for p in policy.model.parameters())
    return {"policy": name, "params": params, "c_us": c_s * 1e6, "ort_us": ort_s * 1e6, "torch_us": torch_s * 1e6,
            "weights_B": params * 4, "text_B": size["text"], "data_B": size["data"],
            "code_B": size["text"] + size["data"] - 4 * c_graph(policy).num_floats,
            "flash_B": size["text"] + size["data"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="timed calls per repeat (onnxruntime, torch)")
    ap.add_argument("--c-steps", type=int, default=20_000, help="timed steps per repeat inside C")
    ap.add_argument("--repeats", type=int, default=20,
                    help="timed repeats; the best is reported (short loops, many repeats: robust to a shared CPU)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = [measure("MLP 64-64 actor", mlp_actor(), args), measure("RAPTOR GRU 16", load_raptor(), args)]
    print(f"Export benchmark on {cpu_name()}, torch {torch.__version__}, "
          f"batch 1, 1 thread, best of {args.repeats}")
    print()
    print("| policy | params | C step (gcc -O2) us | onnxruntime us | torch us | weights B | "
          "object text B (-Os) | object data B | code B | flash total B |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['policy']} | {r['params']:,} | {r['c_us']:.2f} | {r['ort_us']:.1f} | {r['torch_us']:.1f} | "
              f"{r['weights_B']:,} | {r['text_B']:,} | {r['data_B']:,} | {r['code_B']:,} | "
              f"{r['flash_B']:,} |")
    print()
    print("flash total = object text + data (the text holds the static const weights and normalization stats); "
          "code = flash total - stored floats x 4.")


if __name__ == "__main__":
    main()
