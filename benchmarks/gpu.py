"""robo's throughput on one device (a GPU when torch sees one, else the CPU), as one table.

Rows: the batched quadrotor simulator's env-steps/s (``BatchedQuadrotorSim.step``, float32, randomized parameters)
at B = 1k, 64k, 1M and the largest batch that fits (doubling from 1M until out of memory or out of time), for each
step backend of ``--sim-backends`` (default: ``torch``, the eager RK4, and on CUDA also ``compiled``, its
``torch.compile``, compiled for each batch size on top of the time share); the imitation
trainer's steps/s at batch 256 (``robo.imitation.ImitationTrainer``, synthetic batches of push-T's shapes:
state (5,) and image (3, 96, 96) + state (2,), the push-T presets' policies) for the diffusion U-Net and the
energy policy; SAC hover (``robo train +experiment=hover_quick`` with ``--sac-algo``, default ``sac_fast``: the
networks, the replay and the batched sim on the device, stepped by the compiled backend on CUDA; the main job's
untrimmed actor, observing its position integral, is what is evaluated)
env-steps/s and the wall time until an evaluation's median error is below 5 cm; and the latency of one
chunk at batch 1 (DDIM with 10 steps; the energy policy's descent). ``--budget-s`` bounds the whole run (default
480 s: 8 minutes); each part gets its share and reports what it reached in it.

    python benchmarks/gpu.py                          # the device torch finds
    python benchmarks/gpu.py --device cpu --budget-s 240 --threads 2
    python benchmarks/gpu.py --only sim train         # some parts only

On a machine with its own Python and CUDA torch and no package index: ``make wheels`` here, carry ``dist/wheels``
and the source, then ``pip install --no-index --find-links dist/wheels -e . --no-deps`` and the same for the
dependencies (docs/guide/gpu.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # robo's source, uninstalled

from omegaconf import OmegaConf  # noqa: E402

from robo.device import resolve_device  # noqa: E402

SIM_BATCHES = (1_000, 64_000, 1_000_000)
PARTS = ("sim", "train", "sac", "latency")
SHARES = {"sim": 0.2, "train": 0.4, "sac": 0.3, "latency": 0.1}
TRAIN_CASES = (("diffusion", "pusht"), ("diffusion", "pusht_image"), ("energy", "pusht"), ("energy", "pusht_image"))
SHAPES = {"pusht": (5, 2, None), "pusht_image": (2, 2, [3, 96, 96])}  # obs_dim, action_dim, image_shape


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower() or isinstance(e, MemoryError)


def free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


# Simulator ---------------------------------------------------------------------------------------
def sim_rate(batch: int, device: torch.device, seconds: float, backend: str = "torch") -> tuple[float, int, float]:
    """(env-steps/s, steps timed, seconds to make the simulator) of ``BatchedQuadrotorSim.step`` (no validation)
    with ``step_backend=backend`` on ``batch`` hovering quadrotors for about ``seconds``; making a "compiled"
    simulator compiles its step, which is not in the rate. The open-loop randomized quadrotors drift off and spin
    up (non-finite after about 4000 steps), so every 1000 steps they start again from hover."""
    from sims.quadrotor import BatchedQuadrotorSim
    from sims.quadrotor.randomization import RandomizationConfig, sample_params

    p = sample_params(RandomizationConfig(), batch, seed=0, dtype=torch.float32, device=device)
    if backend == "compiled":  # one graph per batch size: drop the earlier ones, or past TorchDynamo's
        torch.compiler.reset()  # recompile_limit (8) a batch size would run eagerly
    t0 = time.perf_counter()
    sim = BatchedQuadrotorSim(p, step_backend=backend)
    sync(device)
    build = time.perf_counter() - t0
    if sim.step_backend != backend:
        raise RuntimeError(f"step_backend={backend!r} fell back to {sim.step_backend!r} (see the warning)")
    a = (2 * p.hover_command() - 1)[:, None].expand(-1, 4).contiguous()
    start = sim.state.clone()
    sim.step(a, validate=False)  # warm-up
    sync(device)
    n, t0 = 0, time.perf_counter()
    while n < 1 or time.perf_counter() - t0 < seconds:
        sim.step(a, validate=False)
        n += 1
        if n % 10 == 0:
            sync(device)
        if n % 1000 == 0:
            sim.reset(start)
    sync(device)
    wall = time.perf_counter() - t0
    if not bool(torch.isfinite(sim.state).all()):
        raise RuntimeError(f"the state became non-finite at B={batch}")
    return batch * n / wall, n, build


def bench_sim(device: torch.device, budget: float, max_batch: int, backends: tuple[str, ...]) -> list[tuple]:
    """Rows of each step backend in turn (an equal share of ``budget`` each), then the best of all."""
    rows, measured, deadline = [], [], time.perf_counter() + budget
    for i, backend in enumerate(backends):
        share = (deadline - time.perf_counter()) / (len(backends) - i)
        backend_rows, backend_measured = bench_sim_backend(device, share, max_batch, backend)
        rows += backend_rows
        measured += [(b, rate, backend) for b, rate in backend_measured]
    if measured:
        b, rate, backend = max(measured, key=lambda m: m[1])
        rows.append(("sim env-steps/s, best", f"{rate:,.0f}", f"B={b:,}, step_backend={backend}"))
    return rows


def bench_sim_backend(device: torch.device, budget: float, max_batch: int, backend: str) -> tuple[list, list]:
    """(rows, [(B, env-steps/s)]) of ``step_backend=backend`` at B = 1k, 64k, 1M, then doubling from 1M (up to
    ``max_batch``) until out of memory or time. A "compiled" cell compiles for its batch size first (its notes
    say how long), on top of its share of the time."""
    rows, deadline = [], time.perf_counter() + budget
    per_cell = budget / (len(SIM_BATCHES) + 3)
    measured: list[tuple[int, float]] = []
    batches = [b for b in SIM_BATCHES if b <= max_batch]
    b = batches[-1] * 2
    while b <= max_batch:
        batches.append(b)
        b *= 2
    build = 0.0
    for b in batches:
        if b > SIM_BATCHES[-1] and time.perf_counter() + per_cell + build > deadline:
            break
        try:
            rate, n, build = sim_rate(b, device, per_cell if b in SIM_BATCHES else per_cell / 2, backend)
        except Exception as e:  # noqa: BLE001 (out of memory, or a gap on this device: the table says so)
            free(device)
            if b in SIM_BATCHES or not is_oom(e):
                rows.append((f"sim env-steps/s, {backend}, B={b:,}", "failed", error_text(e)))
            break
        measured.append((b, rate))
        compiled = f"; compiled in {build:.0f} s" if backend == "compiled" else ""
        if b in SIM_BATCHES:
            rows.append((f"sim env-steps/s, {backend}, B={b:,}", f"{rate:,.0f}", f"{n} steps{compiled}"))
    if measured and measured[-1][0] > SIM_BATCHES[-1]:
        rows.append((f"sim env-steps/s, {backend}, largest B={measured[-1][0]:,}", f"{measured[-1][1]:,.0f}",
                     f"doubling from 1M until out of memory, time or --max-sim-batch {max_batch:,}"))
    return rows, measured


# Imitation training ---------------------------------------------------------------------------------
def synthetic_windows(policy, obs_dim: int, action_dim: int, image_shape, episodes: int = 4, length: int = 120):
    """``ChunkWindows`` of random episodes of push-T's shapes (throughput does not depend on the values)."""
    from robo.imitation import ChunkWindows

    rng = np.random.default_rng(0)
    eps = []
    for _ in range(episodes):
        ep = {"obs": rng.uniform(-0.2, 0.2, (length, obs_dim)).astype(np.float32),
              "action": rng.uniform(-0.2, 0.2, (length, action_dim)).astype(np.float32)}
        if image_shape:
            ep["image"] = rng.integers(0, 256, (length, *image_shape), dtype=np.uint8)
        eps.append(ep)
    return eps, ChunkWindows(eps, policy.n_obs_steps, policy.horizon, policy.n_action_steps)


def preset_policy(kind: str, task: str):
    """The push-T preset's policy (``robo train policy=<kind> task=<task>``) for the shapes of ``task``."""
    from robo.imitation import compute_stats
    from robo.imitation.sources import make_imitation_policy
    from robo.run_dir import compose

    c = OmegaConf.to_container(compose("train", [f"policy={kind}", f"task={task}"]), resolve=True)
    obs_dim, action_dim, image_shape = SHAPES[task]
    policy = make_imitation_policy(c["policy"], obs_dim, action_dim, image_shape)
    eps, windows = synthetic_windows(policy, obs_dim, action_dim, image_shape)
    policy.set_normalization(compute_stats(eps))
    return policy, windows, c["policy"].get("train") or {}


def train_rate(kind: str, task: str, device: torch.device, seconds: float, batch: int, amp: str | None,
               compile_: bool) -> tuple[float, int]:
    """(steps/s, steps timed) of the imitation trainer at ``batch`` after 3 warm-up steps."""
    from robo.imitation import ImitationTrainer, TrainConfig

    policy, windows, preset = preset_policy(kind, task)
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(steps=3, batch_size=batch, lr=float(preset.get("lr", 1e-4)), warmup_steps=1,
                             log_every=10**9, checkpoint_every=10**9, amp=amp, compile=compile_)
        trainer = ImitationTrainer(policy, windows, config, tmp, device=device)
        trainer.train(progress=False)  # warm-up (and compilation)
        start_wall, start_step, chunk = trainer.wall_time, trainer.step, 1
        while True:
            trainer.c.steps = trainer.step + chunk
            trainer.train(progress=False)
            sync(device)
            timed, elapsed = trainer.step - start_step, trainer.wall_time - start_wall
            if elapsed >= seconds and timed >= 2:
                break
            chunk = max(1, min(200, int(timed / max(elapsed, 1e-6) * (seconds - elapsed))))
        return timed / elapsed, timed


def bench_train(device: torch.device, budget: float, batch: int, amp: str | None, compile_: bool) -> list[tuple]:
    rows = []
    per_case = budget / len(TRAIN_CASES)
    for kind, task in TRAIN_CASES:
        label = f"{kind} train steps/s, {task}, batch {batch}"
        t0 = time.perf_counter()
        try:
            rate, n = train_rate(kind, task, device, per_case * 0.6, batch, amp, compile_)
            rows.append((label, f"{rate:.2f}", f"{n} steps; {time.perf_counter() - t0:.0f} s with set-up"))
        except Exception as e:  # noqa: BLE001
            rows.append((label, "failed", error_text(e)))
            free(device)
    return rows


# SAC hover ------------------------------------------------------------------------------------------
class TimeUp(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Raise ``TimeUp`` in the main thread after ``seconds`` (SIGALRM)."""
    def on_alarm(signum, frame):
        raise TimeUp()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def bench_sac(device: torch.device, budget: float, target: float = 0.05, algo: str = "sac_fast") -> list[tuple]:
    """SAC hover from scratch (``+experiment=hover_quick algo=<algo>``, stopping at ``target`` m median error of the
    evaluated actor, as the main job deploys it)."""
    from robo.rl.trainer import Trainer
    from robo.run_dir import compose

    fused = ["+sim.step_backend=compiled"] if device.type == "cuda" else []  # few envs: launches dominate eager
    cfg = compose("train", ["+experiment=hover_quick", f"algo={algo}", f"device={device}",
                            f"stop.median_position_error={target}", "video.enabled=false", *fused])
    c = OmegaConf.to_container(cfg, resolve=True)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(c, Path(tmp))
        t0 = time.perf_counter()
        reached = False
        try:
            with time_limit(budget):
                trainer.train(progress=False)
            reached = any(m["final_median_position_error"] < target for m in trainer.history)
        except TimeUp:
            pass
        wall = time.perf_counter() - t0
        steps = int(trainer.model.num_timesteps) if trainer.model is not None else 0
        hit = next((m for m in trainer.history if m.get("final_median_position_error", 1e9) < target), None)
    best = min((m["final_median_position_error"] for m in trainer.history), default=float("nan"))
    rows = [(f"SAC hover env-steps/s ({algo}, evaluations included)", f"{steps / wall:,.0f}",
             f"{steps:,} env steps in {wall:.0f} s, {c['num_envs']} envs")]
    if hit is not None or reached:
        rows.append((f"SAC hover time to < {target * 100:.0f} cm", f"{hit['wall_time']:.0f} s",
                     f"at {hit['step']:,} env steps (evaluated every {c['eval_every']:,})"))
    else:
        rows.append((f"SAC hover time to < {target * 100:.0f} cm", f"not within {budget:.0f} s",
                     "no evaluation reached" if best != best else "every evaluated flight crashed"
                     if best == float("inf") else f"best evaluation {best * 100:.1f} cm"))
    return rows


# Latency --------------------------------------------------------------------------------------------
def latency_ms(policy, device: torch.device, seconds: float, repeats: int = 20) -> tuple[float, int]:
    """(median ms, calls timed) of ``predict_chunk`` at batch 1 on ``device`` (inputs and initial sample there)
    after 2 warm-up calls: ``repeats`` calls, fewer (3 at least) where they would take over ``seconds``."""
    from policies.chunked import draw_noise
    from robo.device import move_policy

    move_policy(policy, device)
    c = policy.config
    obs = torch.zeros(1, policy.n_obs_steps, policy.obs_dim, device=device)
    if getattr(c, "image_shape", None):
        obs = {"state": obs, "image": torch.rand(1, policy.n_obs_steps, *c.image_shape, device=device)}
    times, start = [], time.perf_counter()
    for k in range(repeats + 2):
        noise = draw_noise(policy, 1).to(device)
        sync(device)
        t0 = time.perf_counter()
        policy.predict_chunk(obs, noise)
        sync(device)
        if k >= 2:
            times.append(1e3 * (time.perf_counter() - t0))
            if len(times) >= 3 and time.perf_counter() - start > seconds:
                break
    return statistics.median(times), len(times)


def bench_latency(device: torch.device, budget: float) -> list[tuple]:
    from policies.chunked import with_config

    rows = []
    for kind, label in (("diffusion", "DDIM-10 chunk latency"), ("energy", "energy chunk latency")):
        try:
            policy, _, _ = preset_policy(kind, "pusht")
            if kind == "diffusion":
                policy = with_config(policy, inference_scheduler="ddim", num_inference_steps=10)
            ms, n = latency_ms(policy, device, budget / 2)
            steps = f"{policy.config.n_steps} descent steps" if kind == "energy" else "10 DDIM steps"
            rows.append((f"{label}, batch 1, pusht", f"{ms:.2f} ms", f"{steps}; median of {n}"))
        except Exception as e:  # noqa: BLE001
            rows.append((f"{label}, batch 1, pusht", "failed", error_text(e)))
    return rows


# Requirements -----------------------------------------------------------------------------------------
def requirement_name(req: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-")


def closure(names, skip: set[str]) -> dict[str, str]:
    """{distribution: installed version} of ``names`` and everything they require here (no extras), without
    ``skip`` and what only they require."""
    seen: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = requirement_name(todo.pop())
        if name in seen or name in skip or name.startswith("nvidia-"):
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist.version
        todo += [r for r in (dist.requires or []) if "extra ==" not in r]
    return seen


def requirements(which: str) -> list[str]:
    """Pinned requirements (``name==version``, as installed here) of robo without torch and what torch brings
    (a CUDA torch on the GPU machine has its own): ``all``, robo's core dependencies; ``bench``, the
    distributions this benchmark imports."""
    torch_deps = set(closure(["torch"], set())) | {"triton", "robo"}
    if which == "all":
        names = [r for r in md.requires("robo") or [] if "extra ==" not in r]
    else:
        import importlib

        for module in ("robo.rl.trainer", "robo.imitation", "robo.imitation.sources", "sims", "policies.registry",
                       "torch.utils.tensorboard", "hydra", "robo.evaluate"):
            importlib.import_module(module)
        packages = md.packages_distributions()
        names = sorted({d for m in list(sys.modules) for d in packages.get(m.split(".")[0], [])})
    return [f"{k}=={v}" for k, v in sorted(closure(names, torch_deps).items())]


def split_wheels(folder: Path, part_mib: float) -> list[Path]:
    """Move the files of ``folder`` into ``folder/part-1``, ``part-2``, ... of at most ``part_mib`` MiB each
    (largest first, each into the first part with room), so that each part fits one device run's carry."""
    files = sorted((p for p in folder.iterdir() if p.is_file() and p.suffix in (".whl", ".gz", ".zip")),
                   key=lambda p: -p.stat().st_size)
    parts: list[list[Path]] = []
    sizes: list[int] = []
    limit = part_mib * 2**20
    for f in files:
        size = f.stat().st_size
        if size > limit:
            raise ValueError(f"{f.name} is {size / 2**20:.0f} MiB, over --part-mib {part_mib:g}")
        i = next((i for i, s in enumerate(sizes) if s + size <= limit), len(parts))
        if i == len(parts):
            parts.append([])
            sizes.append(0)
        parts[i].append(f)
        sizes[i] += size
    out = []
    for i, part in enumerate(parts, 1):
        target = folder / f"part-{i}"
        target.mkdir(exist_ok=True)
        for f in part:
            f.rename(target / f.name)
        out.append(target)
    return out


# Table ----------------------------------------------------------------------------------------------
def error_text(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{'out of memory' if is_oom(e) else type(e).__name__}: {text[:90]}"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (robo.device)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget of the whole run, s")
    ap.add_argument("--sac-seconds", type=float, default=None, help="time limit of the SAC run (default: its share)")
    ap.add_argument("--sac-algo", default="sac_fast", choices=["sac_fast", "sac"],
                    help="sac_fast: sim, replay and updates on the device; sac: SB3's, its env on the CPU")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--batch", type=int, default=256, help="imitation training batch")
    ap.add_argument("--amp", choices=["bf16"], default=None, help="bf16 autocast in the imitation trainer")
    ap.add_argument("--compile", action="store_true", help="torch.compile the imitation policies")
    ap.add_argument("--sim-backends", nargs="+", choices=["torch", "compiled", "c"], default=None,
                    help="simulator step backends timed (default: torch, and compiled on CUDA)")
    ap.add_argument("--max-sim-batch", type=int, default=None,
                    help="largest simulator batch tried (default: 2^31 on CUDA, 4M on the CPU, whose OOM kills)")
    ap.add_argument("--requirements", choices=["bench", "all"], default=None,
                    help="print the pinned non-torch requirements (for `make wheels`) and exit")
    ap.add_argument("--split-wheels", type=Path, default=None, metavar="FOLDER",
                    help="move FOLDER's wheels into part-1, part-2, ... of at most --part-mib each and exit")
    ap.add_argument("--part-mib", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.requirements:
        print("\n".join(requirements(args.requirements)))
        return
    if args.split_wheels:
        for part in split_wheels(args.split_wheels, args.part_mib):
            mib = sum(p.stat().st_size for p in part.iterdir()) / 2**20
            print(f"{part}: {len(list(part.iterdir()))} files, {mib:.1f} MiB")
        return
    try:
        device = resolve_device(args.device)
    except ValueError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("MUJOCO_GL", "egl")
    t_start = time.perf_counter()
    shares = {p: SHARES[p] for p in args.only}
    total = sum(shares.values())
    rows = []
    for part in args.only:
        left = args.budget_s - (time.perf_counter() - t_start)
        budget = max(1.0, left * shares[part] / total)
        total -= shares[part]
        print(f"[{time.perf_counter() - t_start:6.0f} s] {part}: {budget:.0f} s", file=sys.stderr, flush=True)
        if part == "sim":
            cap = args.max_sim_batch or (2**31 if device.type == "cuda" else 4_000_000)
            backends = args.sim_backends or (["torch", "compiled"] if device.type == "cuda" else ["torch"])
            rows += bench_sim(device, budget, cap, tuple(backends))
        elif part == "train":
            rows += bench_train(device, budget, args.batch, args.amp, args.compile)
        elif part == "sac":
            rows += bench_sac(device, args.sac_seconds or budget * 0.9, algo=args.sac_algo)
        else:
            rows += bench_latency(device, budget)
    wall = time.perf_counter() - t_start
    print(f"robo on {device_name(device)}; torch {torch.__version__}; {os.cpu_count()} CPUs; "
          f"{wall:.0f} s of a {args.budget_s:.0f} s budget\n")
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | value | notes |")
    print(f"|{'-' * (width + 2)}|------:|-------|")
    for name, value, notes in rows:
        print(f"| {name:<{width}} | {value} | {notes} |")


if __name__ == "__main__":
    main()
