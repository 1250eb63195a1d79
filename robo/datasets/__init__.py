"""Datasets of demonstrations in LeRobot's format v3.0 (parquet + meta/*.parquet + mp4 or PNG frames)."""

from .convert import convert_legacy
from .format import CODEBASE_VERSION
from .reader import LeRobotDataset
from .writer import DatasetWriter

__all__ = ["CODEBASE_VERSION", "DatasetWriter", "LeRobotDataset", "convert_legacy"]
