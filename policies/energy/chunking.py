"""What the energy-based chunk policies share: input checks, normalization, per-env queues, checkpoints.

A subclass provides ``model`` (an ``nn.Module`` with ``obs_normalizer`` and ``action_normalizer``
children, so the stats travel with the weights, and ``features``, ``ChunkInputs``) and two methods in
the normalized space: ``_infer(obs_n (B, n_obs_steps, obs_feature_dim), init (B, horizon, action_dim) |
None) -> (chunk (B, horizon, action_dim) in [-1, 1], energy (B,))`` and
``_loss(obs_n, action_n (B, horizon, action_dim)[, init=guesses]) -> scalar``. ``obs_n`` is the model's
``features`` of the normalized state window (and of its images, for image observations).

Inputs may come from anywhere (numpy, tensors on any device): they are moved to the weights' device
(``QueuedActing.device``) once per call, ``_infer`` computes there, and the answer goes back as the caller gave it.
"""

from __future__ import annotations

import torch

from ..base import ArrayLike, like_input
from ..checkpoint import TorchPolicyCheckpointing
from ..chunked import QueuedActing, check_tensor, split_observation, state_of
from ..ema import AveragedWeights, make_ema
from ..normalize import check_policy_stats


class ChunkPolicyBase(QueuedActing, AveragedWeights, TorchPolicyCheckpointing):
    """``ChunkedPolicy`` plumbing (see ``policies/chunked.py``); subclasses implement the math.

    With ``config.use_ema`` the policy also keeps ``ema``, a moving average of ``model``'s weights
    (``policies.ema``; the trainer calls ``update_ema`` after each optimizer step): it is what acts
    (``inference_model``) and what is saved; ``model`` is what trains."""

    learns_from_pairs = False  # whether ``_loss`` takes ``init=`` (guess, chunk) pairs

    def __init__(self, config, model: torch.nn.Module):
        config.validate()
        self.config, self.model = config, model
        self.model.eval()
        self.ema = make_ema(model, config.ema_power, config.ema_max_decay) if config.use_ema else None
        self.obs_dim, self.action_dim = config.obs_dim, config.action_dim
        self.n_obs_steps, self.horizon, self.n_action_steps = config.n_obs_steps, config.horizon, config.n_action_steps
        self.last_energy: torch.Tensor | None = None  # (B,) energy of the last planned chunks

    @property
    def noise_shape(self) -> tuple[int, int]:
        return (self.horizon, self.action_dim)

    def set_normalization(self, stats: dict[str, dict[str, torch.Tensor]]) -> None:
        """``stats = {"obs": {"min", "max"} or {"mean", "std"}, "action": {"min", "max"}}`` of shape (dim,)."""
        check_policy_stats(stats)
        for model in self.weight_copies():
            if model.obs_normalizer.mode != "identity":
                model.obs_normalizer.set_stats(stats["obs"])
            model.action_normalizer.set_stats(stats["action"])

    # --- stateless prediction -------------------------------------------------------------

    def _obs_window(self, obs_history) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(state (B, n_obs_steps, obs_dim), image (B, n_obs_steps, 3, H, W) or None), checked, on the weights'
        device."""
        return split_observation(obs_history, self.obs_dim, self.config.image_shape, self.n_obs_steps, self.device)

    def _initial_guess(self, noise: ArrayLike | None, batch: int) -> torch.Tensor | None:
        if noise is None:
            return None
        return check_tensor(noise, (batch, self.horizon, self.action_dim), "noise (initial guess)", self.device)

    @torch.no_grad()
    def predict_chunk(self, obs_history: ArrayLike, noise: ArrayLike | None = None,
                      return_energy: bool = False, **infer_options):
        """obs_history (B, n_obs_steps, obs_dim) raw (image observations: ``{"state": that, "image":
        (B, n_obs_steps, 3, H, W) in [0, 1]}``) -> actions (B, horizon, action_dim) raw: numpy for numpy input,
        else a tensor on the input's device (computed on the weights' device).

        ``noise`` (B, horizon, action_dim): the initial guess in the normalized action space
        ([-1, 1]). With ``return_energy`` also returns the final energy (B,) (lower: more
        confident); it is kept in ``last_energy`` (on the weights' device) either way. ``infer_options`` go to the
        optimizer (``n_steps=`` for the energy policy).
        """
        state, image = self._obs_window(obs_history)
        init = self._initial_guess(noise, state.shape[0])
        model = self.inference_model.eval()  # the image crop's eval mode (``compute_loss`` switches to training)
        chunk_n, energy = self._infer(model.features(model.obs_normalizer(state), image), init, **infer_options)
        actions = model.action_normalizer.unnormalize(chunk_n)
        self.last_energy = energy.detach()
        actions = like_input(actions, state_of(obs_history))
        return (actions, like_input(energy, state_of(obs_history))) if return_energy else actions

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """batch {"obs": (B, n_obs_steps, obs_dim), "action": (B, horizon, action_dim)[, "image": (B,
        n_obs_steps, 3, H, W) in [0, 1], image observations]} raw -> loss.
        With "init" (B, horizon, action_dim), normalized guesses, ``action`` holds the chunk each guess
        must descend to (a teacher's, see ``robo.imitation.distill``); only ``learns_from_pairs`` policies."""
        for key in ("obs", "action"):
            if key not in batch:
                raise KeyError(f"batch needs {key!r}, got {sorted(batch)}")
        state, image = self._obs_window({"state": batch["obs"], "image": batch.get("image")})
        action = check_tensor(batch["action"], (state.shape[0], self.horizon, self.action_dim), "batch['action']")
        self.model.train()  # random image crops (``predict_chunk`` switches back)
        pairs = {}
        if batch.get("init") is not None:
            if not self.learns_from_pairs:
                raise ValueError(f"{type(self).__name__} learns from demonstrations only, not from (guess, chunk) "
                                 f"pairs: drop the batch's 'init'")
            pairs["init"] = self._initial_guess(batch["init"], state.shape[0])
        state_n = self.model.obs_normalizer(state)
        return self._loss(self.model.features(state_n, image), self.model.action_normalizer(action).clamp(-1, 1),
                          **pairs)

    # --- per-env queues (LeRobot's select_action) -------------------------------------------

    @torch.no_grad()
    def act(self, obs: ArrayLike, noise: ArrayLike | None = None) -> ArrayLike:
        """obs (B, obs_dim) (image observations: ``{"state": that, "image": (B, 3, H, W) in [0, 1]}``) ->
        action (B, action_dim), through the policy's ``ChunkQueue``. Plans a chunk for the envs whose queue is
        empty, from ``noise`` (B, horizon, action_dim) rows of those envs (ignored otherwise); ``last_energy``
        (B,) then holds the energy of each env's current chunk. Numpy in, numpy out; a tensor in, a tensor out on
        its device; computed on the weights' device."""
        state, image = split_observation(obs, self.obs_dim, self.config.image_shape, device=self.device)
        b = state.shape[0]
        init = self._initial_guess(noise, b)

        def plan(need: torch.Tensor, window) -> torch.Tensor:
            last = self.last_energy
            fits = last is not None and last.shape == (b,) and last.device == state.device
            energy = last.clone() if fits else torch.zeros(b, device=state.device)
            chunk, planned = self.predict_chunk(window, None if init is None else init[need], return_energy=True)
            energy[need] = planned
            self.last_energy = energy
            return chunk

        return like_input(self.queued_action(state, image, plan), state_of(obs))

    # --- checkpoints ------------------------------------------------------------------------------

    @classmethod
    def config_from_saved(cls, saved: dict):
        """The config of a checkpoint's ``config.json``: ``config_class.from_saved`` (which drops the keys of
        removed options that hold their old default)."""
        return cls.config_class.from_saved(saved)
