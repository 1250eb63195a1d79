"""``robo export``, called in-process through ``robo.cli.main`` as a user would type it."""

import json
import shutil

import onnx
import pytest

from robo.cli import main


def export(tmp_path, *args, name="run"):
    run = tmp_path / name
    main(["export", *args, f"hydra.run.dir={run}"])
    return run, json.loads((run / "parity.json").read_text())


def test_onnx_from_a_checkpoint_folder(tmp_path, mlp_policy, capsys):
    ckpt = mlp_policy.save(tmp_path / "ckpt")
    run, parity = export(tmp_path, f"policy={ckpt}", "format=onnx")
    assert parity["passed"] and parity["max_abs_diff"] < 1e-5 and parity["policy_kind"] == "mlp"
    onnx.checker.check_model(onnx.load(str(run / "export" / "policy.onnx")))
    assert f"path: {ckpt}" in (run / "config.yaml").read_text()
    assert "parity        passed" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed: C parity needs a compiler")
def test_c_for_raptor(tmp_path):
    out = tmp_path / "firmware"
    run, parity = export(tmp_path, "policy=raptor", "format=c", f"out={out}", "prefix=raptor")
    assert sorted(p.name for p in out.iterdir()) == ["main.c", "manifest.json", "raptor.c", "raptor.h"]
    assert parity["passed"] and parity["max_abs_diff"] < 1e-5
    assert parity["checks"] == ["C rollout, 500 steps, gcc -O2"]
    assert parity["object_size_Os"]["text"] > 2084 * 4  # the weights are in flash


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed: C parity needs a compiler")
def test_c_for_a_steered_diffusion_checkpoint(tmp_path):
    from tests.hardware.conftest import make_diffusion_mlp, make_steered

    ckpt = make_steered(make_diffusion_mlp()).save(tmp_path / "ckpt")
    run, parity = export(tmp_path, f"policy={ckpt}", "format=c", "parity_steps=24")
    assert parity["passed"] and parity["policy_kind"] == "steered" and parity["max_abs_diff"] < 1e-5
    assert parity["checks"] == ["C plan of 64 windows", "C rollout, 24 steps, gcc -O2"]
    assert "#define ROBO_POLICY_N_ACTION_STEPS 4" in (run / "export" / "robo_policy.h").read_text()


def test_torchscript_of_a_gru_checkpoint(tmp_path, gru_policy):
    ckpt = gru_policy.save(tmp_path / "ckpt")
    run, parity = export(tmp_path, "policy=checkpoint", f"policy.path={ckpt}", "format=torchscript",
                         "parity_steps=50")
    assert (run / "export" / "policy.pt").is_file()
    assert parity["passed"] and "rollout, 50 steps, batch 8" in parity["checks"]


def failing(tmp_path, capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(["export", *args, f"hydra.run.dir={tmp_path / 'bad'}"])
    assert e.value.code != 0
    return capsys.readouterr().err


def test_bad_input_gets_a_clear_error(tmp_path, capsys, monkeypatch):
    assert "unknown export format 'tflite'" in failing(tmp_path, capsys, "policy=raptor", "format=tflite")
    err = failing(tmp_path, capsys, f"policy={tmp_path / 'nowhere'}", "format=onnx")
    assert "nowhere: no such file or folder" in err
    (tmp_path / "empty").mkdir()
    err = failing(tmp_path, capsys, f"policy={tmp_path / 'empty'}", "format=onnx")
    assert "is not a robo checkpoint" in err and "config.json is missing" in err
    assert "policy.path is required" in failing(tmp_path, capsys, "format=onnx")
    assert "tolerance=-1: give the largest" in failing(tmp_path, capsys, "policy=raptor", "tolerance=-1")
    # a parity failure is an error, with the report left in the run folder: an ONNX runtime 1e-3 off
    from hardware.export import onnx_export

    runner = onnx_export.onnx_runner
    monkeypatch.setattr(onnx_export, "onnx_runner", lambda path: lambda x: [y + 1e-3 for y in runner(path)(x)])
    err = failing(tmp_path, capsys, "policy=raptor", "format=onnx")
    assert "the onnx export differs from torch beyond tolerance 1e-05: action by " in err
    assert json.loads((tmp_path / "bad" / "parity.json").read_text())["passed"] is False


def test_out_folder_with_other_files_is_not_replaced(tmp_path, capsys):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    assert "holds other files" in failing(tmp_path, capsys, "policy=raptor", "format=onnx", f"out={precious}")
    assert (precious / "notes.txt").read_text() == "keep me"
