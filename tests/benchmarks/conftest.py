import importlib

import pytest

from tests.benchmarks import BENCHMARKS


@pytest.fixture
def benchmark(monkeypatch):
    """``benchmark(name)``: the script benchmarks/<name>.py imported as it runs (its folder on sys.path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
