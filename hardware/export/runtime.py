"""An export folder run as the flight controller runs it: ``robo_policy.c`` (and the modules it calls) compiled
into a shared library with the host's gcc and stepped through ctypes, fed as its ``manifest.json`` says.

    policy = ExportedPolicy("export/")       # robo export format=c out=export/ (any kind: MLP, GRU, chunked)
    policy.manifest.previous_action          # the conventions it was trained with
    actions = policy.act(obs)                # obs (B, obs_dim) float32 -> (B, action_dim), one C state per row

``robo eval policy=export policy.path=export/`` flies it with the manifest's previous-action convention and
refuses a task whose observation size or control rate differs (one line naming it).
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from .c_build import compile_c
from .manifest import DeploymentManifest, ManifestError, read_manifest

SHIM = """#include <stddef.h>
#include "robo_policy.h"
size_t robo_policy_state_size(void) { return sizeof(robo_policy_state); }
"""


class ExportedPolicy:
    """The C of an export folder behind robo's ``Policy`` interface; ``manifest``: its deployment manifest."""

    kind = "exported"

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not (self.folder / "robo_policy.c").is_file():
            raise ManifestError(f"{self.folder} holds no robo_policy.c: export the policy with robo export format=c "
                                f"(policy=export flies a C export)")
        self.manifest: DeploymentManifest = read_manifest(self.folder)
        self.obs_dim, self.action_dim = int(self.manifest.obs_dim), int(self.manifest.action_dim)
        self._build = Path(tempfile.mkdtemp(prefix="robo-exported-"))
        self._lib = self._compile()
        self._lib.robo_policy_state_size.restype = ctypes.c_size_t
        self._size = int(self._lib.robo_policy_state_size())
        self._states: list[ctypes.Array] = []

    def _compile(self) -> ctypes.CDLL:
        units = [p for p in sorted(self.folder.glob("*.c")) if p.name != "main.c"]
        (self._build / "shim.c").write_text(SHIM)
        out = self._build / "librobo_policy.so"
        try:
            compile_c([*units, self._build / "shim.c"], out, flags=("-shared", "-fPIC", f"-I{self.folder}"))
        except RuntimeError as e:
            raise ManifestError(f"compiling {self.folder}'s C failed: {str(e).splitlines()[-1]}") from None
        return ctypes.CDLL(str(out))

    def reset(self, mask=None) -> None:
        rows = range(len(self._states)) if mask is None else np.flatnonzero(np.asarray(mask, dtype=bool))
        for i in rows:
            self._lib.robo_policy_reset(self._states[i])

    def act(self, obs):
        x = np.ascontiguousarray(np.asarray(torch.as_tensor(obs).detach().cpu(), dtype=np.float32))
        single = x.ndim == 1
        x = x[None] if single else x
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(f"observation has shape {x.shape}, expected (B, {self.obs_dim})")
        if not np.isfinite(x).all():
            raise ValueError("observation contains NaN or inf")
        while len(self._states) < len(x):  # a fresh C state per new row, reset as the firmware resets it at arming
            state = ctypes.create_string_buffer(self._size)
            self._lib.robo_policy_reset(state)
            self._states.append(state)
        out = np.empty((len(x), self.action_dim), dtype=np.float32)
        f = ctypes.POINTER(ctypes.c_float)
        for i in range(len(x)):
            self._lib.robo_policy_step(self._states[i], x[i].ctypes.data_as(f), out[i].ctypes.data_as(f))
        out = out[0] if single else out
        return torch.as_tensor(out) if isinstance(obs, torch.Tensor) else out

    def save(self, directory: str | Path) -> Path:
        """Copy the export folder (code and manifest) to ``directory``."""
        directory = Path(directory)
        shutil.copytree(self.folder, directory, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("harness*", "*.o", "*.so"))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "ExportedPolicy":
        return cls(directory)

    def __del__(self):
        shutil.rmtree(getattr(self, "_build", ""), ignore_errors=True)
