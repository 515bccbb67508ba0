"""Pretrained transformers opened up: every intermediate of one attention layer, checked against the model.

    >>> from mha_viz.pretrained import load_model
    >>> model = load_model()                  # the bundled all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads)
    >>> trace = model.trace("The cat sat on the mat", layer=2)
    >>> trace.weights.shape                   # (H, T, T), equal to the model's own output_attentions
    (12, 8, 8)
    >>> causal = load_model("mha-viz/induction-2l")   # the bundled causal model: GPT-2, 2 layers x 4 heads
    >>> causal.generate("red fox blue sky red", 3).tokens   # its layer-1 heads copy what followed "red"
    ('fox', 'blue', 'sky')

Adapted: BERT, RoBERTa, XLM-R, DistilBERT, MiniLM; GPT-2; LLaMA, Mistral, Qwen2; T5, BART.
Any other architecture gives weights-only traces (from output_attentions).
"""

from .attribution import LogitAttribution
from .errors import (
    InvalidModelNameError,
    ModelDownloadError,
    ModelIntegrityError,
    ModelLoadError,
    ModelNotInstalledError,
)
from .generation import Generation, GenerationStep
from .loading import (
    BUNDLED_MODEL,
    BUNDLED_SHA256,
    INDUCTION_MODEL,
    INDUCTION_SHA256,
    bundled_model_dir,
    induction_model_dir,
    load_model,
)
from .model import PretrainedModel

__all__ = [
    "BUNDLED_MODEL",
    "BUNDLED_SHA256",
    "INDUCTION_MODEL",
    "INDUCTION_SHA256",
    "Generation",
    "GenerationStep",
    "InvalidModelNameError",
    "LogitAttribution",
    "ModelDownloadError",
    "ModelIntegrityError",
    "ModelLoadError",
    "ModelNotInstalledError",
    "PretrainedModel",
    "bundled_model_dir",
    "induction_model_dir",
    "load_model",
]
