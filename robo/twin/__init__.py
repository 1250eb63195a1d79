"""Digital-twin glue: drivers' measurements into ``sims.twin``, the stand-in real robot, shadow and
twin-in-the-loop flights, offline evaluation of many policies in the calibrated twin."""

from .offline import evaluate_in_twin, hover_scores
from .runner import MODES, TwinFlight, fly_with_twin, twin_measurement
from .standin import StandIn, StandInConfig, perturbed, stand_in, stand_in_robot

__all__ = ["MODES", "StandIn", "StandInConfig", "TwinFlight", "evaluate_in_twin", "fly_with_twin", "hover_scores",
           "perturbed", "stand_in", "stand_in_robot", "twin_measurement"]
