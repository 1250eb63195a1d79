"""Simulators and gymnasium environments."""
