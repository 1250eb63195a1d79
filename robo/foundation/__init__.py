"""RAPTOR-style foundation policy: RL teachers per quadrotor on Ray, DAgger into a GRU student."""

from .config import DaggerConfig, FoundationRunConfig, HeldOutConfig, RayConfig, TeacherConfig
from .dagger import collect, distill
from .fleet import Labeller, TeacherEnsemble
from .evaluate import evaluate_policy
from .pipeline import evaluate_all, held_out_quadrotors, load_teachers, run_pipeline
from .teachers import Manifest, run_teachers, sample_quadrotors, teacher_specs, train_teacher

__all__ = ["DaggerConfig", "FoundationRunConfig", "HeldOutConfig", "Labeller", "Manifest", "RayConfig", "TeacherConfig",
           "TeacherEnsemble", "collect", "distill", "evaluate_all", "evaluate_policy", "held_out_quadrotors",
           "load_teachers", "run_pipeline", "run_teachers", "sample_quadrotors", "teacher_specs", "train_teacher"]
