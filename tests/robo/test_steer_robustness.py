"""The steering robustness benchmark at its smallest: one toy base, one SAC seed, DSRL's defaults.

``benchmarks/steer_robustness.py`` trains base 0 (``policy=diffusion_mlp task=obstacle_reach``, 1,000 steps: 47 % on
the 100 evaluation seeds) and steers it for 6,000 env steps; the deploy gate must hand out a policy at or above the
base, and DSRL must lift this base (95 % deployed in the benchmark's table, docs/experiments/steering.md). About
5 minutes on one core, so it is slow.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dsrl_deploys_at_or_above_the_base_on_the_toy(tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "steer_robustness.py"), "task=obstacle_reach",
           "total_env_steps=6000", "--bases", "1", "--seeds", "1", "--methods", "dsrl", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads((out / "results.json").read_text())
    assert 0.2 <= row["base_success"] <= 0.7, row  # a base DSRL has room to lift
    assert row["deployed"] >= row["base_success"], row
    assert row["deployed"] >= 0.9, row
    assert "deployed_ge_0.95" in done.stdout  # the summary table was printed
