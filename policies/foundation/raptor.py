"""Load RAPTOR's released foundation policy (the ``foundation-policy`` pip package's HDF5
checkpoint, written by RLtools) into a robo ``FoundationPolicy``.

The HDF5 file holds ``actor/layers/{0,1,2}``: Dense(22->16, ReLU), GRU(16), Dense(16->4,
identity). RLtools' GRU stacks gate weights in the order (r, z, n), as torch does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .configuration_foundation import FoundationConfig
from .modeling_foundation import FoundationGRU, FoundationPolicy

RLTOOLS_ACTIVATIONS = {"RELU": "relu", "TANH": "tanh", "IDENTITY": "identity"}


def raptor_checkpoint_path() -> Path:
    """Path of the HDF5 checkpoint shipped inside the ``foundation-policy`` package."""
    try:
        import importlib.resources as resources

        import foundation_policy  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("RAPTOR's policy needs the 'foundation-policy' package: pip install foundation-policy") from e
    return Path(str(resources.files("foundation_policy").joinpath("blob", "checkpoint.h5")))


def _dense(group) -> tuple[np.ndarray, np.ndarray, str]:
    w = group["weights"]["parameters"][()]
    b = group["biases"]["parameters"][()].reshape(-1)
    act = group.attrs["activation_function"]
    act = act.decode() if isinstance(act, bytes) else str(act)
    if act not in RLTOOLS_ACTIVATIONS:
        raise ValueError(f"unsupported RLtools activation {act!r} in {group.name}")
    return w, b, RLTOOLS_ACTIVATIONS[act]


def load_raptor(path: str | Path | None = None, clip_actions: bool = True) -> FoundationPolicy:
    """Convert RAPTOR's HDF5 checkpoint (default: the one in ``foundation-policy``) to a robo policy.

    ``clip_actions`` clips the output to [-1, 1] in the policy. RAPTOR's last layer is linear and RLtools l2f,
    where it was trained, fed its raw output back as the next observation's previous action (the step clips only
    the command it applies), so a flight that feeds RAPTOR L2F's previous action (``raw_motor_state``) wants
    ``clip_actions=False``; ``robo.evaluate.flown_policy`` picks it by the flight's convention, as ``robo eval``
    does. The default stays True: the command applied is the same either way, and a clipped output is what robo's
    own convention (``clipped_hover``) and a residual on top of RAPTOR expect."""
    import h5py

    path = Path(path) if path is not None else raptor_checkpoint_path()
    if not path.is_file():
        raise FileNotFoundError(f"RAPTOR checkpoint not found at {path}")
    with h5py.File(path, "r") as f:
        layers = f["actor"]["layers"]
        types = [layers[str(i)].attrs["type"] for i in range(len(layers))]
        types = [t.decode() if isinstance(t, bytes) else str(t) for t in types]
        if types != ["dense", "gru", "dense"]:
            raise ValueError(f"{path}: expected layers dense, gru, dense; found {types}")
        w_in, b_in, act_in = _dense(layers["0"])
        g = layers["1"]
        gru = {k: g[k]["parameters"][()] for k in
               ("weights_input", "weights_hidden", "biases_input", "biases_hidden", "initial_hidden_state")}
        w_out, b_out, act_out = _dense(layers["2"])
    config = FoundationConfig(obs_dim=w_in.shape[1], hidden_dim=w_in.shape[0], action_dim=w_out.shape[0],
                              input_activation=act_in, output_activation=act_out, clip_actions=clip_actions)
    model = FoundationGRU(config)
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32))  # noqa: E731
    state = {
        "input_layer.weight": t(w_in), "input_layer.bias": t(b_in),
        "gru.weight_ih": t(gru["weights_input"]), "gru.weight_hh": t(gru["weights_hidden"]),
        "gru.bias_ih": t(gru["biases_input"]), "gru.bias_hh": t(gru["biases_hidden"]),
        "output_layer.weight": t(w_out), "output_layer.bias": t(b_out),
        "initial_hidden": t(gru["initial_hidden_state"]),
    }
    model.load_state_dict(state)
    return FoundationPolicy(config, model)
