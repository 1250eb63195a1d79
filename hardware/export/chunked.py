"""Export specs of the action-chunk policies (diffusion, energy-based, implicit BC).

What is exported is each family's network; the sampling loop stays outside the graph and is run
around the exported network exactly as the policy runs it in torch (see ``denoiser_spec``'s docstring):

- ``diffusion``: the EMA denoiser ``(noisy_actions (B, horizon, A), timestep (B,) int64, global_cond
  (B, cond_dim)) -> noise``; the scheduler, its settings and the horizons are in the ONNX metadata.
- ``energy`` and ``implicit_bc``: the energy network ``(obs_n (B, n_obs_steps, obs_feature_dim), chunk (B,
  horizon, A)), both normalized -> energy (B,)`` (``obs_n``: the normalized state, followed for image policies
  by the image encoder's features, which run outside the exported graph as the diffusion policy's do).
  Implicit BC's derivative-free optimizer needs only energies; EBT-style gradient descent needs dE/d(chunk),
  which the ONNX exporter cannot trace, so an energy policy's descent runs with torch (or through onnxruntime
  with finite differences).
"""

from __future__ import annotations

import torch

from .spec import ModuleSpec, denoiser_spec, register_module_spec


def diffusion_spec(policy) -> ModuleSpec:
    """The EMA denoiser (U-Net or MLP) of a ``DiffusionPolicy`` as a denoiser spec (state and image policies alike:
    ``global_cond`` is ``DiffusionModel.condition``'s output)."""
    model, c = policy.inference_model, policy.config
    return denoiser_spec(model.denoiser, c.horizon, c.action_dim, c.obs_feature_dim * c.n_obs_steps, metadata={
        "policy_kind": policy.kind, "inference_scheduler": c.inference_scheduler,
        "num_inference_steps": str(c.num_inference_steps), "num_train_timesteps": str(c.num_train_timesteps),
        "beta_schedule": c.beta_schedule, "prediction_type": c.prediction_type,
        "n_obs_steps": str(c.n_obs_steps), "n_action_steps": str(c.n_action_steps)})


def energy_network_spec(policy) -> ModuleSpec:
    """The energy network of an ``energy`` or ``implicit_bc`` policy (inputs in normalized units)."""
    c, b = policy.config, 2
    inputs = {"obs_n": torch.zeros(b, c.n_obs_steps, c.obs_feature_dim),
              "chunk": torch.zeros(b, c.horizon, c.action_dim)}
    meta = {"policy_kind": policy.kind, "n_obs_steps": str(c.n_obs_steps), "horizon": str(c.horizon),
            "n_action_steps": str(c.n_action_steps)}
    for key in ("n_steps", "n_candidates"):  # the energy policy's descent and best-of-N run outside the network
        if hasattr(c, key):
            meta[key] = str(getattr(c, key))
    return ModuleSpec(policy.inference_model.eval(), inputs, ["energy"], metadata=meta)


register_module_spec("diffusion", diffusion_spec)
register_module_spec("energy", energy_network_spec)
register_module_spec("implicit_bc", energy_network_spec)
