"""``robo export``: write a policy as ONNX, C99 or TorchScript, and check it against torch.

The artifacts and their deployment manifest (``manifest.json``: ``hardware.export.manifest``, built by
``robo.deployment``) go to ``out`` (default ``<run folder>/export``, written atomically); the run folder
gets ``config.yaml`` and ``parity.json`` (max |exported - torch| and how it was measured).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from hardware.export import (export_c, export_onnx, export_torchscript, module_spec, object_size, verify_c,
                             verify_onnx, verify_torchscript)
from hardware.export.c_build import find_cc
from hardware.export.manifest import FILE as MANIFEST_FILE
from hardware.export.manifest import write_manifest
from policies.checkpoint import atomic_directory
from robo.deployment import deployment_manifest
from robo.factory import make_policy
from robo.run_dir import seed_run, write_json, write_resolved_config

log = logging.getLogger(__name__)


def rewrite_overrides(overrides: list[str]) -> list[str]:
    """``policy=<folder>`` -> ``policy.path=<folder>`` unless ``<folder>`` names a policy config
    (``raptor``, ``checkpoint``, ...), so a checkpoint folder can be given directly."""
    import robo.configs

    names = {p.stem for p in (Path(robo.configs.__file__).parent / "policy").glob("*.yaml")}
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        out.append(f"policy.path={value}" if sep and key == "policy" and value not in names else o)
    return out


def _onnx(policy, directory: Path, cfg) -> tuple[list[Path], dict]:
    path = export_onnx(policy, directory / "policy.onnx")
    report = verify_onnx(module_spec(policy), path, float(cfg.tolerance), steps=int(cfg.parity_steps),
                         seed=int(cfg.seed))
    return [path], report.as_dict()


def _torchscript(policy, directory: Path, cfg) -> tuple[list[Path], dict]:
    path = export_torchscript(policy, directory / "policy.pt")
    report = verify_torchscript(module_spec(policy), path, float(cfg.tolerance), steps=int(cfg.parity_steps),
                                seed=int(cfg.seed))
    return [path], report.as_dict()


def _c(policy, directory: Path, cfg) -> tuple[list[Path], dict]:
    sources = export_c(policy, directory, str(cfg.prefix), seed=int(cfg.seed), spread=int(cfg.spread))
    paths = [directory / name for name in sources.files]
    try:
        find_cc()
    except RuntimeError as e:
        log.warning("C parity not checked: %s", e)
        return paths, {"skipped": str(e), "passed": None}
    report = verify_c(policy, sources, int(cfg.parity_steps), float(cfg.tolerance), int(cfg.seed)).as_dict()
    report["object_size_Os"] = object_size(sources)
    return paths, report


ARTIFACT_SUFFIXES = {".onnx", ".pt", ".c", ".h", ".json"}


def _check_replaceable(out: Path) -> None:
    """``out`` is replaced as a whole: refuse a folder holding anything but earlier export artifacts."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={out} is a file; give a folder for the exported artifacts")
    others = [p.name for p in out.iterdir() if p.suffix not in ARTIFACT_SUFFIXES or p.is_dir()] if out.is_dir() else []
    if others:
        raise ValueError(f"out={out} holds other files ({sorted(others)[:5]}), which an export would replace; "
                         "choose a new or empty folder")


FORMATS: dict[str, Callable] = {"onnx": _onnx, "c": _c, "torchscript": _torchscript}


def run(cfg: DictConfig, run_dir: Path) -> dict:
    fmt = str(cfg.format)
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {sorted(FORMATS)} (format=onnx)")
    if not float(cfg.tolerance) >= 0:
        raise ValueError(f"tolerance={cfg.tolerance}: give the largest |exported - torch| to accept, >= 0 (1e-5)")
    if OmegaConf.is_missing(cfg.policy, "path"):
        raise ValueError("no policy to export: give policy=<checkpoint folder> (or policy.path=...), policy=raptor "
                         "or policy=robo_foundation")
    seed_run(int(cfg.seed))
    write_resolved_config(run_dir, cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    policy = make_policy(c["policy"])
    out = Path(cfg.out) if cfg.out else Path(run_dir) / "export"
    _check_replaceable(out)
    log.info("exporting a %s policy as %s to %s", policy.kind, fmt, out)
    with atomic_directory(out) as tmp:
        written, parity = FORMATS[fmt](policy, tmp, cfg)
        # the deployment contract beside the code: conventions, rate, motor order, weights hash
        manifest = deployment_manifest(policy, fmt, [p.name for p in written], c["policy"].get("path"),
                                       int(cfg.get("spread", 0)) if fmt == "c" else 0)
        write_manifest(tmp, manifest)
    artifacts = [str(out / p.name) for p in written] + [str(out / MANIFEST_FILE)]
    write_json(Path(run_dir) / "parity.json", {"format": fmt, "policy_kind": policy.kind, "artifacts": artifacts,
                                               **parity})
    result = {"format": fmt, "policy_kind": policy.kind, "artifacts": ", ".join(artifacts),
              "max_abs_diff": f"{parity['max_abs_diff']:.3g}" if "max_abs_diff" in parity else "n/a",
              "parity": {True: "passed", False: "FAILED", None: "skipped"}[parity["passed"]]}
    if parity["passed"] is False:
        raise RuntimeError(f"the {fmt} export differs from torch beyond tolerance {cfg.tolerance}: "
                           f"{', '.join(parity['failures'])}; see "
                           f"{Path(run_dir) / 'parity.json'} (the artifacts are in {out})")
    return result
