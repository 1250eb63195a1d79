"""Curricula for every robo trainer: scheduled, adaptive, and prioritized level replay."""

from .adaptive import AdaptiveCurriculum
from .base import Curriculum, CurriculumLog, apply, get_path, set_path
from .level_replay import PrioritizedLevelReplay
from .scheduled import Schedule, ScheduledCurriculum

__all__ = ["AdaptiveCurriculum", "Curriculum", "CurriculumLog", "PrioritizedLevelReplay", "Schedule",
           "ScheduledCurriculum", "apply", "get_path", "set_path"]
