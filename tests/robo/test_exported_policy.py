"""``policy=export``: the C of ``robo export format=c`` flown through ctypes as the flight controller runs it, with
the conventions of its manifest, and refused in one line where the task does not match the manifest."""

import json

import numpy as np
import pytest
import torch

from hardware.export.manifest import ManifestError
from hardware.export.parity import observation_sequence
from hardware.export.runtime import ExportedPolicy
from policies.foundation import load_raptor
from robo.cli import main
from robo.evaluate import previous_action_convention
from robo.onboard import export_for_deployment


@pytest.fixture(scope="module")
def raptor_export(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raptor_c")
    export_for_deployment(load_raptor(), folder)
    return folder


def test_an_export_acts_as_torch_row_by_row(raptor_export):
    exported, torch_policy = ExportedPolicy(raptor_export), load_raptor()
    obs = observation_sequence(200, 22, 3, batch_size=3)
    c_actions, t_actions = [], []
    for k, o in enumerate(obs):
        if k == 120:  # row 1 starts a new flight: its C state and torch's hidden state afresh
            mask = np.array([False, True, False])
            exported.reset(mask)
            torch_policy.reset(torch.as_tensor(mask))
        c_actions.append(exported.act(o))
        t_actions.append(torch_policy.act(torch.as_tensor(o)).numpy())
    err = np.abs(np.stack(c_actions) - np.stack(t_actions)).max()
    print(f"\nRAPTOR's C through ctypes vs torch: {err:.1e}")
    assert err < 1e-5
    assert isinstance(exported.act(torch.as_tensor(obs[0])), torch.Tensor)
    with pytest.raises(ValueError, match="expected"):
        exported.act(np.zeros((2, 18), np.float32))


def test_the_manifest_sets_how_it_is_flown(raptor_export, tmp_path):
    exported = ExportedPolicy(raptor_export)
    assert exported.manifest.previous_action == "raw_motor_state"
    assert previous_action_convention(exported) == "raw_motor_state"  # not a FoundationPolicy: from the manifest
    run = tmp_path / "eval"
    main(["eval", "policy=export", f"policy.path={raptor_export}", "seconds=3", "num_envs=16", "plot_envs=0",
          f"hydra.run.dir={run}"])
    m = json.loads((run / "metrics.json").read_text())
    reference = tmp_path / "ref"
    main(["eval", "policy=raptor", "seconds=3", "num_envs=16", "plot_envs=0", f"hydra.run.dir={reference}"])
    r = json.loads((reference / "metrics.json").read_text())
    print(f"\nRAPTOR's C export: {m['final_median_position_error']:.4f} m, torch {r['final_median_position_error']:.4f} m")
    assert m["previous_action"] == r["previous_action"] == "raw_motor_state"
    assert abs(m["final_median_position_error"] - r["final_median_position_error"]) < 1e-3 and m["crashes"] == 0


def test_a_task_the_export_was_not_trained_for_gets_one_line(raptor_export, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["eval", "policy=export", f"policy.path={raptor_export}", "+robot.dt=0.005", "seconds=1",
              f"hydra.run.dir={tmp_path / 'x'}"])
    err = capsys.readouterr().err.strip()
    assert "control rate: task hover on this robot runs at 200 Hz" in err and "\n" not in err
    with pytest.raises(ManifestError, match="holds no robo_policy.c"):
        ExportedPolicy(tmp_path)
    (tmp_path / "robo_policy.c").write_text("int x;\n")
    with pytest.raises(ManifestError, match="manifest.json is missing"):
        ExportedPolicy(tmp_path)
