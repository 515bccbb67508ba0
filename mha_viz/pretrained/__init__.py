"""Pretrained transformers opened up: every intermediate of one attention layer, checked against the model.

    >>> from mha_viz.pretrained import load_model
    >>> model = load_model()                  # the bundled all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads)
    >>> trace = model.trace("The cat sat on the mat", layer=2)
    >>> trace.weights.shape                   # (H, T, T), equal to the model's own output_attentions
    (12, 8, 8)
    >>> causal = load_model("mha-viz/induction-2l")   # the bundled causal model: GPT-2, 2 layers x 4 heads
    >>> causal.generate("red fox blue sky red", 3).tokens   # its layer-1 heads copy what followed "red"
    ('fox', 'blue', 'sky')

Adapted (full traces): BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA, ALBERT, DeBERTa-v2, ModernBERT, GPT-2, GPTBigCode,
GPT-Neo, GPT-NeoX, OPT, Bloom, Falcon, LLaMA, Mistral, Qwen2, Qwen3, SmolLM3, OLMo 2, OLMo 3, Cohere, Cohere 2, Llama
4, Gemma, Gemma2, Gemma 3, Gemma 3n, DeepSeek-V2, DeepSeek-V3, DeepSeek-V3.2, Phi, Phi-3, gpt-oss, DiffLlama, T5, BART
(mha_viz.pretrained.architectures.ADAPTERS). Hybrids of attention with linear-attention or state-space layers, whose
mixers are traced as exact mixing matrices (mha_viz.pretrained.mixing): Qwen3-Next, Qwen3.5, OLMo hybrid, Kimi Linear,
MiniMax, Bamba, Granite 4, Nemotron-H, Falcon-H1, Mamba-2, Mamba, Falcon Mamba, Jamba, LFM2, LFM2-MoE and LFM3
(short convolutions). Any other text architecture gives the model's weights plus the concat, head outputs, W_O and
output of its located output projection (generic.py), or the weights alone; vision, audio and multimodal models are
refused (ModelLoadError). load_model(dtype=, device_map=) opens models larger than one device.
load_model(hooked_transformer) opens a TransformerLens HookedTransformer (a HookedModel: traces checked against its
own cache; mha_viz.pretrained.hooked).
"""

from ..checks import TraceCheckError, TraceCheckWarning
from .attribution import LogitAttribution
from .errors import (
    InvalidModelNameError,
    MixerSizeError,
    ModelConfigError,
    ModelDownloadError,
    ModelIntegrityError,
    ModelLoadError,
    ModelNotInstalledError,
)
from .generation import Generation, GenerationStep
from .hooked import HookedModel, hooked_weights
from .loading import (
    BUNDLED_INSTALL,
    BUNDLED_MODEL,
    BUNDLED_SHA256,
    HYBRID_MODEL,
    HYBRID_SHA256,
    INDUCTION_MODEL,
    INDUCTION_SHA256,
    RECALL_MODEL,
    RECALL_SHA256,
    bundled_model_dir,
    bundled_model_installed,
    induction_model_dir,
    load_model,
    recall_model_dir,
)
from .model import PretrainedModel

__all__ = [
    "BUNDLED_INSTALL",
    "BUNDLED_MODEL",
    "BUNDLED_SHA256",
    "HYBRID_MODEL",
    "HYBRID_SHA256",
    "INDUCTION_MODEL",
    "INDUCTION_SHA256",
    "RECALL_MODEL",
    "RECALL_SHA256",
    "Generation",
    "GenerationStep",
    "HookedModel",
    "InvalidModelNameError",
    "LogitAttribution",
    "MixerSizeError",
    "ModelConfigError",
    "ModelDownloadError",
    "ModelIntegrityError",
    "ModelLoadError",
    "ModelNotInstalledError",
    "PretrainedModel",
    "TraceCheckError",
    "TraceCheckWarning",
    "bundled_model_dir",
    "bundled_model_installed",
    "hooked_weights",
    "induction_model_dir",
    "load_model",
    "recall_model_dir",
]
