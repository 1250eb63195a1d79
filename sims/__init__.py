"""Simulators and gymnasium environments (imports nothing from ``policies``)."""

from . import envs  # noqa: F401  (registers the robo/ gymnasium envs)
