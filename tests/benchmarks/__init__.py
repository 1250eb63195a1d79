"""Tests of the benchmark scripts (benchmarks/, imported as scripts are: their folder on sys.path)."""

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
