"""The command line the benchmarks share: Hydra overrides of the robo command config a benchmark exercises
(``configs/<command>.yaml``, given as ``key=value`` words, as for ``robo <command>``) beside the benchmark's
own flags (what to compare, repeat counts, output paths), composed over the benchmark's defaults (which a
preset such as ``+experiment=...`` overrides too) and checked as ``robo <command>`` checks them: a bad key or
value prints one line and exits with code 2."""

from __future__ import annotations

import argparse

from omegaconf import DictConfig, OmegaConf

from robo.cli import compose, composition_error
from robo.validation import ConfigError, validate


def parser(doc: str, command: str, example: str) -> argparse.ArgumentParser:
    """An argument parser whose positional words are overrides of ``configs/<command>.yaml``, e.g.
    ``example`` (``"total_steps=2000 seed=1"``); the benchmark adds its own flags to it."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=f"KEY=VALUE words are Hydra overrides of configs/{command}.yaml (as for "
                                        f"`robo {command}`),\napplied after the benchmark's defaults; a preset "
                                        f"(+experiment=...) overrides those too.")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                    help=f"Hydra overrides of configs/{command}.yaml, e.g. {example}")
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Flags and overrides in any order (``--seeds 1 total_steps=2000 --json x.json``)."""
    return ap.parse_intermixed_args(argv)


def fail(ap: argparse.ArgumentParser, message: str) -> None:
    """Print ``<benchmark>: error: <message>`` on one line and exit with code 2."""
    ap.exit(2, f"{ap.prog}: error: {message}\n")


def command_config(ap: argparse.ArgumentParser, command: str, overrides: list[str],
                   defaults: list[str] | tuple[str, ...] = (), forced: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """``configs/<command>.yaml`` composed with the benchmark's ``defaults``, the command line's ``overrides`` and
    the words the benchmark ``forced`` after them (the method or seed of one run), and validated
    (``robo.validation``); a bad one ends the benchmark with one line. A default whose key ``overrides`` set, by
    naming it or through a preset (``+experiment=...`` changes it from configs/<command>.yaml), is dropped, so
    that presets win over a benchmark's defaults."""
    try:
        kept = unset_defaults(command, list(defaults), list(overrides)) if defaults else []
        cfg = compose(command, [*kept, *overrides, *forced])
    except Exception as e:  # Hydra's composition errors: unknown group option or key, bad override syntax
        fail(ap, composition_error(str(e)))
    try:
        validate(command, cfg)
    except ConfigError as e:
        fail(ap, str(e))
    return cfg


def unset_defaults(command: str, defaults: list[str], overrides: list[str]) -> list[str]:
    """The words of ``defaults`` that ``overrides`` leave alone: a group choice (``task=hover``) whose group they
    leave at configs/<command>.yaml's option, a ``key=value`` whose key they leave where that config with the kept
    group choices puts it. (A preset that picks the group option the config already picks does not count.)"""
    def key(word: str) -> str:
        return word.split("=", 1)[0].lstrip("+~")

    top = [o for o in overrides if "." not in key(o)]  # group choices and presets, not keys inside a group
    bare, chosen = (compose(command, o, return_hydra_config=True).hydra.runtime.choices for o in ([], top))
    groups = [d for d in defaults if key(d) in bare]
    kept = [d for d in groups if chosen.get(key(d)) == bare.get(key(d))]
    plain, given = compose(command, kept), compose(command, [*kept, *overrides])
    absent = object()

    def value(cfg: DictConfig, tree: dict, k: str):  # ``tree``: cfg unresolved; None where k does not resolve yet
        node = tree
        for part in k.split("."):
            if not isinstance(node, dict) or part not in node:
                return absent
            node = node[part]
        return OmegaConf.select(cfg, k, default=None, throw_on_resolution_failure=False)

    # a default is dropped where the command line changed its key, and where the command line's groups lack the key
    # (task.reward of another task), unless the default adds it (+key=...)
    plain_tree, given_tree = (OmegaConf.to_container(c, resolve=False) for c in (plain, given))
    unset = [d for d in defaults if d not in groups
             and value(plain, plain_tree, key(d)) == value(given, given_tree, key(d))
             and (value(given, given_tree, key(d)) is not absent or d.startswith("+"))]
    return kept + unset
