"""The policy registry: every policy class registers itself, one lookup for loading and for training."""

import dataclasses
import subprocess
import sys

import pytest
import torch

from policies.checkpoint import save_checkpoint
from policies.mlp import MLPConfig, MLPPolicy
from policies.registry import known_kinds, load_policy, policy_class, register
from robo.factory import make_policy
from robo.imitation.sources import make_imitation_policy


def test_every_policy_kind_is_registered_and_the_trainable_ones_are_marked():
    assert known_kinds() == ["diffusion", "energy", "foundation", "implicit_bc", "mlp", "steered"]
    assert known_kinds(trainable=True) == ["diffusion", "energy", "implicit_bc"]
    for kind in known_kinds():
        cls = policy_class(kind)
        assert cls.kind == kind and dataclasses.is_dataclass(cls.config_class)


@pytest.mark.parametrize("module", ["policies.steered", "policies.registry"])
def test_each_policy_module_imports_first_in_a_fresh_interpreter(module):
    """No import cycle: the registry imports no policy module at import time."""
    out = subprocess.run([sys.executable, "-c", f"import {module}; from policies.registry import known_kinds; "
                          f"print(len(known_kinds()))"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6"


def test_unknown_kinds_give_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"^policy kind 'mlp' is not a policy kind robo train builds; "
                                         r"choose one of \['diffusion', 'energy', 'implicit_bc'\]$"):
        make_imitation_policy({"kind": "mlp"}, obs_dim=5, action_dim=2)
    save_checkpoint(tmp_path / "odd", "odd", MLPConfig(), {"w": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"odd: policy kind 'odd' is not a registered policy kind; choose one of "
                                         r"\['diffusion', .*'steered'\]$"):
        load_policy(tmp_path / "odd")
    with pytest.raises(ValueError, match="describes a policy to train.*policy=checkpoint policy.path="):
        make_policy({"kind": "diffusion"})
    with pytest.raises(ValueError, match="unknown policy kind 'nope'; choose 'raptor', 'checkpoint' .*'export' .*'robo_foundation'"):
        make_policy({"kind": "nope"})


def test_load_policy_and_make_policy_find_the_saved_kind(tmp_path):
    policy = MLPPolicy(MLPConfig(obs_dim=3, action_dim=2, hidden_dims=[4]))
    policy.save(tmp_path / "mlp")
    obs = torch.zeros(2, 3)
    for loaded in (load_policy(tmp_path / "mlp"), make_policy({"kind": "checkpoint", "path": str(tmp_path / "mlp")})):
        assert isinstance(loaded, MLPPolicy)
        torch.testing.assert_close(loaded.act(obs), policy.act(obs))


def test_a_kind_registered_twice_or_without_its_attributes_is_refused():
    class Other(MLPPolicy):
        pass

    with pytest.raises(ValueError, match="'mlp' is registered twice"):
        register(Other)
    with pytest.raises(TypeError, match="needs a class attribute kind"):
        register(type("NoKind", (), {}))
    with pytest.raises(TypeError, match="needs a class attribute config_class"):
        register(type("NoConfig", (), {"kind": "no_config"}))
    assert policy_class("mlp") is MLPPolicy
