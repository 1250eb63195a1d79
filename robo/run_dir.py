"""A run folder: everything needed to reproduce, inspect and continue a run, written atomically.

The skeleton every trainer and command shares:

- ``seed_run``: seed torch, numpy and ``random`` and set torch's thread count; ``rng_state`` /
  ``set_rng_state`` carry the generators' states through a checkpoint (bit-for-bit resumes).
- ``checkpoint`` / ``write_checkpoint``: one writer of checkpoint folders (``checkpoints/latest``: what a
  resume needs; ``checkpoints/best``: the kept policy), each replaced atomically
  (``policies.checkpoint.atomic_directory``), with the deployable ``policy/`` and a JSON state file;
  ``read_state`` reads that file back.
- ``write_json`` (metrics, evaluation histories), ``write_resolved_config`` (``config.yaml``). JSON is strict
  (``strict_json``): a value that is not finite (an error of a flight where every start crashed is +inf) is
  written as null with a ``<key>_null_reason`` beside it; ``read_json`` / ``read_state`` restore it.
- ``start_run``: a command's first line: resume (``resume_config``) and seed (``seed_run``).
- ``resume_config``: the config a resumed run continues with: its own saved ``config.yaml``, with only the
  overrides that are safe to change applied on top, and the others refused.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

log = logging.getLogger(__name__)
LATEST, BEST = "latest", "best"  # checkpoints/latest: what resume needs; checkpoints/best: the kept policy
STATE = "state.json"


def atomic_write(path: str | Path, write: Callable[[IO], Any], binary: bool = False) -> Path:
    """Call ``write(file)`` on a temporary file next to ``path``, then ``os.replace`` it (no torn files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``atomic_write``)."""
    return atomic_write(path, lambda f: f.write(text))


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (``atomic_write``)."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), binary=True)


NULL_REASON = "_null_reason"  # suffix of the key that says why its sibling is null


def strict_json(data: Any) -> Any:
    """``data`` as strict JSON can hold it (no ``Infinity`` or ``NaN``, which Python's json writes and strict
    readers such as JavaScript's ``JSON.parse`` or ``jq`` refuse): numpy scalars as Python numbers, a float that
    is not finite as None, with ``<key>_null_reason`` ("+inf", "-inf" or "nan") beside it in its dict; in a list,
    such floats become None and the list's key gets the reason "entries not finite, written as null"."""
    import math

    def scalar(x):
        if hasattr(x, "item") and getattr(x, "ndim", None) == 0:  # numpy / torch scalars
            x = x.item()
        return x

    def bad(x) -> str | None:
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("+inf" if x > 0 else "-inf")
        return None

    def convert(x):
        x = scalar(x)
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                v = scalar(v)
                reason = bad(v)
                if reason is not None:
                    out[k], out[f"{k}{NULL_REASON}"] = None, reason
                    continue
                out[k] = convert(v)
                if isinstance(v, (list, tuple)) and _has_bad(v):
                    out[f"{k}{NULL_REASON}"] = "entries not finite, written as null"
            return out
        if isinstance(x, (list, tuple)):
            return [None if bad(scalar(v)) else convert(v) for v in x]
        return x

    def _has_bad(v) -> bool:
        return any(bad(scalar(e)) is not None or (isinstance(e, (list, tuple)) and _has_bad(e)) for e in v)

    return convert(data)


def from_strict_json(data: Any) -> Any:
    """``strict_json``'s inverse for dict values: a null with a "+inf", "-inf" or "nan" reason beside it becomes
    that float again (the reason key is dropped); anything else is left as read."""
    values = {"+inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
    if isinstance(data, list):
        return [from_strict_json(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for k, v in data.items():
        reason = data.get(f"{k}{NULL_REASON}")
        if v is None and reason in values:
            out[k] = values[reason]
        elif not (k.endswith(NULL_REASON) and data.get(k[: -len(NULL_REASON)]) is None
                  and v in values):
            out[k] = from_strict_json(v)
    return out


def dumps_json(data: Any, indent: int = 2) -> str:
    """``data`` as strict JSON text (``strict_json``), sorted keys; refuses anything else not JSON-able."""
    return json.dumps(strict_json(data), indent=indent, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: str | Path, data: Any) -> Path:
    """``data`` as indented strict JSON with sorted keys (metrics, evaluation histories, benchmark rows),
    written atomically."""
    return atomic_write_text(path, dumps_json(data))


def read_json(path: str | Path) -> Any:
    """A file ``write_json`` wrote, its non-finite values restored (``from_strict_json``)."""
    return from_strict_json(json.loads(Path(path).read_text()))


def write_resolved_config(run_dir: str | Path, cfg) -> Path:
    """Save the fully resolved config as ``config.yaml`` (the run can be redone from it)."""
    from omegaconf import OmegaConf

    return atomic_write_text(Path(run_dir) / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))




# Seeds and threads ------------------------------------------------------------------------------
def seed_run(seed: int, threads: int | None = None) -> None:
    """Seed torch, numpy's global generator and Python's ``random`` with ``seed``; with ``threads`` > 0
    use that many torch CPU threads (0 or None: leave torch's count as it is, all cores by default)."""
    import random

    import numpy as np
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    torch.manual_seed(int(seed))
    np.random.seed(int(seed))
    random.seed(int(seed))


def rng_state(generator=None) -> dict:
    """The states of torch's, numpy's and Python's global generators, and of ``generator`` (a
    ``torch.Generator``, e.g. a trainer's batch sampler) under ``"sampler"``; ``set_rng_state`` puts them back."""
    import random

    import numpy as np
    import torch

    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if generator is not None:
        state["sampler"] = generator.get_state()
    return state


def set_rng_state(state: dict, generator=None) -> None:
    """Restore what ``rng_state`` returned (``generator`` from ``state["sampler"]``)."""
    import random

    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if generator is not None:
        generator.set_state(state["sampler"])


# Checkpoint folders -----------------------------------------------------------------------------
@contextmanager
def checkpoint(folder: str | Path, policy=None, state: dict | None = None,
               state_file: str = STATE) -> Iterator[Path]:
    """Write the checkpoint folder ``folder`` (e.g. ``<run>/checkpoints/latest``) atomically: the body
    writes its own files (optimizer, replay buffer, ...) into the yielded temporary folder; then
    ``policy`` (anything with ``save(dir)``) goes to ``policy/`` and ``state`` (JSON-able; numpy scalars
    become floats) to ``state_file``, and the folder replaces ``folder`` in one rename. On an error
    ``folder`` keeps its last complete version."""
    from policies.checkpoint import atomic_directory

    with atomic_directory(folder) as tmp:
        yield tmp
        if policy is not None:
            policy.save(tmp / "policy")
        if state is not None:
            (tmp / state_file).write_text(dumps_json(state, indent=1))


def write_checkpoint(folder: str | Path, policy=None, state: dict | None = None, state_file: str = STATE) -> Path:
    """``checkpoint`` with nothing else to write (e.g. ``checkpoints/best``: the policy and its metrics)."""
    with checkpoint(folder, policy, state, state_file):
        pass
    return Path(folder)


def read_state(folder: str | Path, state_file: str = STATE) -> dict | None:
    """The JSON ``state_file`` of a checkpoint folder, or None where there is none."""
    path = Path(folder) / state_file
    return read_json(path) if path.is_file() else None


# Resume -----------------------------------------------------------------------------------------
def start_run(cfg, run_dir: str | Path, safe: set[str], command: str):
    """(config, run folder) a command runs with: with ``resume=<run>``, the run's own config (``resume_config``,
    ``safe``: the keys an override may change) and folder, its checkpoint writes that a kill cut short undone
    (``finish_interrupted_writes``); then ``seed_run(cfg.seed, cfg.threads)``."""
    if cfg.get("resume"):
        cfg = resume_config(cfg, safe, command)
        run_dir = cfg.resume
        finish_interrupted_writes(run_dir)
    seed_run(int(cfg.seed), int(cfg.threads))
    return cfg, Path(run_dir)


def finish_interrupted_writes(run_dir: str | Path) -> list[Path]:
    """Undo the checkpoint-folder writes that a killed process left anywhere under ``run_dir``
    (``policies.checkpoint.remove_unfinished``: temporary folders removed; a folder killed between its two renames
    put back from its previous version), so that a resume finds each checkpoint whole. The folders it repaired."""
    import re

    from policies.checkpoint import remove_unfinished

    found = {p.parent / m.group(1) for p in Path(run_dir).rglob(".*")
             if (m := re.fullmatch(r"\.(.+)\.(?:tmp|old)-.+", p.name))}
    for folder in sorted(found):
        log.warning("finishing an interrupted write of %s", folder)
        remove_unfinished(folder)
    return sorted(found)


def saved_config(run_dir: str | Path, command: str):
    """The ``config.yaml`` a run folder was started with (an OmegaConf ``DictConfig``)."""
    from omegaconf import OmegaConf

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {path} not found (is {run_dir} a robo {command} run folder?)")
    return OmegaConf.load(path)


def typed_overrides() -> list[str]:
    """The ``key=value`` overrides typed on this command line (Hydra's ``overrides.task``); [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def with_run_groups(overrides: list[str]) -> list[str]:
    """A resuming command's ``rewrite_overrides``: with ``resume=<run>``, the config groups the run was started
    with (``policy=diffusion``, ``+experiment=...``, from its ``.hydra``) first, where not typed again, so that
    ``robo train resume=<run> policy.train.steps=N`` composes as the run did."""
    resume = [o.split("=", 1)[1] for o in overrides if o.startswith("resume=")]
    if not resume:
        return overrides
    run_dir = Path(resume[-1])
    choices = (_hydra_file(run_dir, "hydra.yaml") or {}).get("hydra", {}).get("runtime", {}).get("choices") or {}
    typed = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    groups = [o for o in _hydra_file(run_dir, "overrides.yaml") or []
              if o.split("=", 1)[0].lstrip("+~") in set(choices) - typed]
    return groups + overrides


def resume_config(cfg, safe: set[str], command: str, typed: list[str] | None = None):
    """The config (a ``DictConfig``) to continue the run folder ``cfg.resume`` with: its saved ``config.yaml``,
    whatever defaults this command line gives, with:

    - each override typed on this command line (``typed``, by default Hydra's; ``resume=`` and ``hydra.*``
      aside) that changes a key in ``safe`` (a dotted key, or a top-level key covering all below it) applied
      with its value in ``cfg``, and logged; one that changes any other key refused (one-line ValueError);
      one that changes nothing (e.g. the run's own command line typed again) ignored;
    - a key this robo has but the saved config lacks (added since) filled from this robo's defaults for the
      run's own command line (its ``.hydra/overrides.yaml``, else ``cfg``) and logged; a key it no longer has
      dropped and logged;
    - ``resume`` set to the run folder."""
    from omegaconf import OmegaConf

    run_dir = Path(cfg.resume)
    saved = OmegaConf.to_container(saved_config(run_dir, command), resolve=True)
    log.info("resuming %s with its config.yaml", run_dir)
    now = OmegaConf.to_container(cfg, resolve=True)
    original = _hydra_file(run_dir, "overrides.yaml")
    reference = now if original is None else _compose_defaults(command, run_dir, original)
    merged = _reconciled(saved, reference)
    choices = (_hydra_file(run_dir, "hydra.yaml") or {}).get("hydra", {}).get("runtime", {}).get("choices") or {}
    refused = []
    for key, line in _typed_keys(typed_overrides() if typed is None else typed):
        if _unchanged(key, line, saved, now, choices):
            continue
        if key in safe or key.split(".")[0] in safe:
            _set(merged, key, _get(now, key))
            log.info("resume: applying %s=%s", key, _get(now, key))
        elif key in choices:
            refused.append(f"{key} (the run has {choices[key]}, given {line.split('=', 1)[-1]})")
        else:
            refused.append(f"{key} (the run has {_short(_get(saved, key))}, given {_short(_get(now, key))})")
    if refused:
        raise ValueError(f"cannot change on resume: {'; '.join(refused)}. Resume {run_dir} with only the keys that "
                         f"may change ({', '.join(sorted(safe))}), or start a new run")
    merged["resume"] = str(cfg.resume)
    return OmegaConf.create(merged)


class _Missing:
    def __repr__(self) -> str:
        return "<not set>"


_MISSING = _Missing()


def _typed_keys(typed: list[str]) -> list[tuple[str, str]]:
    """(dotted key or config group, override line) of each typed override, the first line of each key only."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    seen, out = set(), []
    for o in OverridesParser.create().parse_overrides(typed):
        key = o.key_or_group
        if key in seen or key == "resume" or key.split(".")[0] == "hydra" or key.startswith("hydra/"):
            continue
        seen.add(key)
        out.append((key, o.input_line))
    return out


def _unchanged(key: str, line: str, saved: dict, now: dict, choices: dict) -> bool:
    """Whether an override leaves the run as it was: a config group chosen as the run chose it, or a value
    equal to the saved one."""
    if key in choices:
        return line.split("=", 1)[-1] == ("null" if choices[key] is None else str(choices[key]))
    return _get(now, key) == _get(saved, key)


def _short(value, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _hydra_file(run_dir: Path, name: str):
    """``run_dir/.hydra/<name>`` (what Hydra wrote when the run started), or None."""
    from omegaconf import OmegaConf

    path = run_dir / ".hydra" / name
    return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else None


def compose(command: str, overrides: list[str], return_hydra_config: bool = False):
    """``configs/<command>.yaml`` composed with Hydra ``overrides`` as ``hydra.main`` composes it (a DictConfig,
    without the ``hydra`` node unless ``return_hydra_config``: its ``runtime.choices`` name each group's option);
    inside a running ``robo`` command, from its already initialized search path."""
    from hydra import compose as hydra_compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose(command, overrides=list(overrides), return_hydra_config=return_hydra_config)
    with initialize_config_module("robo.configs", version_base="1.3"):
        return hydra_compose(command, overrides=list(overrides), return_hydra_config=return_hydra_config)


def _compose_defaults(command: str, run_dir: Path, overrides: list[str]) -> dict:
    """This robo's config for the run's own command line (its defaults where the run's config lacks a key)."""
    from omegaconf import OmegaConf

    overrides = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/", "resume="))]
    try:
        return OmegaConf.to_container(compose(command, overrides), resolve=True)
    except Exception as e:  # an override this robo no longer has: the run used an option that is gone
        raise ValueError(f"cannot resume {run_dir}: the command line it was started with ({' '.join(overrides)}) "
                         f"does not compose with this robo: {e}") from e


def _reconciled(saved: dict, reference: dict, prefix: str = "") -> dict:
    """``saved`` with the keys only ``reference`` has added and those it lacks dropped (both logged)."""
    out = {}
    for k, v in saved.items():
        if k not in reference:
            log.warning("resume: %s%s is no longer a robo setting; ignoring the run's value %r", prefix, k, v)
        elif isinstance(v, dict) and isinstance(reference[k], dict):
            out[k] = _reconciled(v, reference[k], f"{prefix}{k}.")
        else:
            out[k] = v
    for k, v in reference.items():
        if k not in saved:
            log.info("resume: %s%s is not in the run's config.yaml (added since); using the default %r",
                     prefix, k, v)
            out[k] = v
    return out


def _get(d: dict, dotted: str):
    """The value at a dotted key of a nested dict (``_MISSING`` where there is none)."""
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return _MISSING
        d = d[part]
    return d


def _set(d: dict, dotted: str, value) -> None:
    """Set (or, with ``_MISSING``, delete) a dotted key of a nested dict."""
    *parents, last = dotted.split(".")
    for part in parents:
        d = d.setdefault(part, {})
    if value is _MISSING:
        d.pop(last, None)
    else:
        d[last] = value
