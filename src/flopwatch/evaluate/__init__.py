"""Evaluation of estimators: the study's repeated-split protocol, metrics and threshold verification."""

from __future__ import annotations

from flopwatch.evaluate.splits import EvaluationResult, ModelEvaluation, draw_splits, evaluate_models
from flopwatch.evaluate.threshold import threshold_rates, verdict

__all__ = [
    "EvaluationResult",
    "ModelEvaluation",
    "draw_splits",
    "evaluate_models",
    "threshold_rates",
    "verdict",
]
