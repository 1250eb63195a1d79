"""robo's main job against Learning to Fly's own trainer, in one run on one machine: one table.

Rows:
- Learning to Fly (``rl-tools/learning-to-fly``, its ``training_benchmark`` build: TD3, 300k env steps, no
  evaluations), built from ``--l2f-source`` with g++ -O3 -march=native and MKL's GEMM (its
  ``RL_TOOLS_BACKEND_ENABLE_MKL``; the headers and libraries of pip's ``mkl-devel``, ``pip install -e .[l2f]``), and
  with ``--generic`` also RLtools' generic (no-BLAS) backend. L2F's code is not a dependency of robo: give a
  checkout with its submodule (``git clone --recursive https://github.com/rl-tools/learning-to-fly``; the paper's
  commit is d401e35 with rl_tools 95cb6d2). Timed: its own "Training took" line.
- robo's main job (``+experiment=hover_quick``, the C step in training) for each seed: the training seconds and env
  steps to its first evaluation < 5 cm with 0 crashes on the 256 starts (the run stops there: that actor is the one
  deployed), evaluations included, and the gradient steps a second.

    pip install -e '.[l2f]'
    python benchmarks/learning_to_fly.py --l2f-source ~/learning-to-fly --seeds 3
    python benchmarks/learning_to_fly.py --seeds 1                     # robo's rows only
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_config, fail, parse, parser  # noqa: E402
from table import print_table  # noqa: E402

from omegaconf import OmegaConf  # noqa: E402

from robo.rl.trainer import Trainer  # noqa: E402
from robo.run_dir import seed_run  # noqa: E402

DEFAULTS = ["+experiment=hover_quick", "video.enabled=false", "checkpoint_every=1000000",
            "stop.median_position_error=0.05", "stop.crashes=0"]
L2F_STEPS = 300_000
FLAGS = ["-O3", "-march=native", "-std=c++17", "-DNDEBUG", "-DLEARNING_TO_FLY_IN_SECONDS_BENCHMARK",
         *(f"-include{h}" for h in ("cassert", "fstream", "iostream", "filesystem"))]


def mkl() -> tuple[Path, Path]:
    """(include dir, lib dir) of pip's mkl-devel in this environment; exits with one line if it is missing."""
    prefix = Path(sysconfig.get_paths()["data"])
    include, lib = prefix / "include", prefix / "lib"
    if not (include / "mkl.h").exists() or not list(lib.glob("libmkl_core.so*")):
        raise FileNotFoundError(f"MKL not found under {prefix}: pip install -e '.[l2f]' (mkl-devel)")
    return include, lib


def build_l2f(source: Path, out: Path, with_mkl: bool) -> tuple[Path, dict]:
    """L2F's training_benchmark built from ``source`` into ``out``; (binary, environment to run it in)."""
    if not (source / "src" / "training.cpp").exists() or not (source / "external/rl_tools/include").exists():
        raise FileNotFoundError(f"{source} is not a learning-to-fly checkout with external/rl_tools "
                                "(git clone --recursive https://github.com/rl-tools/learning-to-fly)")
    binary, cmd, env = out / ("l2f_mkl" if with_mkl else "l2f_generic"), ["g++", *FLAGS], {}
    cmd += ["-I", str(source / "include"), "-I", str(source / "external/rl_tools/include")]
    if with_mkl:
        include, lib = mkl()
        libs = [next(lib.glob(f"libmkl_{n}.so*")) for n in ("intel_lp64", "sequential", "core")]
        cmd += ["-DRL_TOOLS_BACKEND_ENABLE_MKL", "-I", str(include)]
        env = {"LD_LIBRARY_PATH": str(lib)}
    cmd += [str(source / "src" / "training.cpp"), "-o", str(binary)]
    if with_mkl:
        cmd += [*map(str, libs), "-lpthread", "-lm", "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True)
    return binary, env


def run_l2f(binary: Path, env: dict) -> float:
    """Training seconds of one run of L2F's benchmark build (its own timer)."""
    text = subprocess.run([str(binary)], check=True, capture_output=True, text=True,
                          env={**os.environ, **env}).stdout
    return float(re.search(r"Training took: ([0-9.]+)s", text).group(1))


def run_robo(ap, overrides: list[str], seed: int) -> dict:
    cfg = command_config(ap, "train", overrides, DEFAULTS, [f"seed={seed}"])
    c = OmegaConf.to_container(cfg, resolve=True)
    seed_run(seed, int(c["threads"]))
    with tempfile.TemporaryDirectory(prefix="robo-l2f-") as tmp:
        trainer = Trainer(c, Path(tmp))
        t0 = time.perf_counter()
        trainer.train(progress=False)
        wall = time.perf_counter() - t0
        updates = trainer.model._n_updates
    hit = next((h for h in trainer.history if h["final_median_position_error"] < 0.05 and h["crashes"] == 0), None)
    steps = hit["step"] if hit else trainer.history[-1]["step"]
    return {"trainer": f"robo main job, seed {seed}", "env steps": steps, "training s": round(wall, 1),
            "to < 5 cm, 0 crashes": f"{hit['wall_time']:.1f} s" if hit else "not reached",
            "gradient steps/s": round(updates / wall)}


def main(argv=None) -> None:
    ap = parser(__doc__, "train", "sim.step_backend=torch")
    ap.add_argument("--l2f-source", type=Path, default=None, help="a learning-to-fly checkout (with submodules)")
    ap.add_argument("--generic", action="store_true", help="also L2F on RLtools' generic backend (slow: minutes)")
    ap.add_argument("--l2f-runs", type=int, default=1, help="runs of each L2F build")
    ap.add_argument("--seeds", type=int, default=1, help="robo runs with seeds 0..N-1")
    args = parse(ap, argv)
    rows = []
    if args.l2f_source is not None:
        with tempfile.TemporaryDirectory(prefix="l2f-") as tmp:
            for with_mkl in (True, False) if args.generic else (True,):
                try:
                    binary, env = build_l2f(args.l2f_source.expanduser(), Path(tmp), with_mkl)
                except (FileNotFoundError, subprocess.CalledProcessError) as e:
                    fail(ap, f"building Learning to Fly: {getattr(e, 'stderr', None) or e}".splitlines()[0])
                for i in range(args.l2f_runs):
                    s = run_l2f(binary, env)
                    rows.append({"trainer": f"Learning to Fly ({'MKL' if with_mkl else 'generic'}), run {i}",
                                 "env steps": L2F_STEPS, "training s": s, "to < 5 cm, 0 crashes": "-"})
    rows += [run_robo(ap, args.overrides, s) for s in range(args.seeds)]
    print_table(rows, ["trainer", "env steps", "training s", "to < 5 cm, 0 crashes", "gradient steps/s"])


if __name__ == "__main__":
    main()
