"""The command line the benchmarks share: Hydra overrides of the robo command config a benchmark exercises
(``configs/<command>.yaml``, given as ``key=value`` words, as for ``robo <command>``) beside the benchmark's
own flags (what to compare, repeat counts, output paths), composed over the benchmark's defaults and checked
as ``robo <command>`` checks them: a bad key or value prints one line and exits with code 2."""

from __future__ import annotations

import argparse

from omegaconf import DictConfig

from robo.cli import compose, composition_error
from robo.validation import ConfigError, validate


def parser(doc: str, command: str, example: str) -> argparse.ArgumentParser:
    """An argument parser whose positional words are overrides of ``configs/<command>.yaml``, e.g.
    ``example`` (``"total_steps=2000 seed=1"``); the benchmark adds its own flags to it."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=f"KEY=VALUE words are Hydra overrides of configs/{command}.yaml (as for "
                                        f"`robo {command}`),\napplied after the benchmark's defaults.")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                    help=f"Hydra overrides of configs/{command}.yaml, e.g. {example}")
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Flags and overrides in any order (``--seeds 1 total_steps=2000 --json x.json``)."""
    return ap.parse_intermixed_args(argv)


def fail(ap: argparse.ArgumentParser, message: str) -> None:
    """Print ``<benchmark>: error: <message>`` on one line and exit with code 2."""
    ap.exit(2, f"{ap.prog}: error: {message}\n")


def command_config(ap: argparse.ArgumentParser, command: str, overrides: list[str]) -> DictConfig:
    """``configs/<command>.yaml`` composed with ``overrides`` (the benchmark's defaults first, the command
    line's after them) and validated (``robo.validation``); a bad one ends the benchmark with one line."""
    try:
        cfg = compose(command, list(overrides))
    except Exception as e:  # Hydra's composition errors: unknown group option or key, bad override syntax
        fail(ap, composition_error(str(e)))
    try:
        validate(command, cfg)
    except ConfigError as e:
        fail(ap, str(e))
    return cfg
