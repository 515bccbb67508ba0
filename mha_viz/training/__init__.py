"""Heads that learn: train a one-layer attention model on synthetic multi-relation tasks.

    >>> from mha_viz.training import train
    >>> run = train("prev-first", num_heads=2, d_model=32, steps=200, seed=0)
    >>> run.relations
    ('previous', 'first')
    >>> run.final.scores.round(2)  # [H, R]: attention mass of each head on each relation's keys
    array([[0.99, 0.  ],
           [0.  , 1.  ]])
    >>> run.final.trace.weights.shape  # the trained layer's AttentionTrace on the task's probe sequence
    (2, 10, 10)
"""

from .layer import TrainedLayer
from .model import TinyAttentionModel
from .precomputed import PRECOMPUTED_GRID, trained_layer
from .scores import relation_masks, relation_scores
from .tasks import DEFAULT_TASK, TASKS, Relation, Task, get_task
from .trainer import Snapshot, TrainingRun, train

__all__ = [
    "DEFAULT_TASK",
    "PRECOMPUTED_GRID",
    "TASKS",
    "Relation",
    "Snapshot",
    "Task",
    "TinyAttentionModel",
    "TrainedLayer",
    "TrainingRun",
    "get_task",
    "relation_masks",
    "relation_scores",
    "train",
    "trained_layer",
]
