"""Which models mha-viz can read: text models fed token ids. Vision, audio and multimodal models are refused."""

from __future__ import annotations

from typing import Any

from torch import nn

from .errors import ModelLoadError

READS = {"pixel_values": "images", "input_features": "audio features", "input_values": "audio samples"}
NON_TEXT_CONFIGS = ("vision_config", "audio_config", "speech_config")


def non_text_reason(config: Any, model_class: type | None = None) -> str | None:
    """Why a model of this config (and class: its main_input_name) is not a text model mha-viz can read (token ids
    in, attention weights as queries x keys out), or None if it is one."""
    if model_class is None:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING

        model_class = MODEL_MAPPING.get(type(config), None)
    name = f"'{config.model_type}'"
    main_input = getattr(model_class, "main_input_name", "input_ids")
    if main_input != "input_ids":
        what = READS.get(main_input, main_input)
        return f"{name} models read {what} ({main_input}), not token ids: mha-viz traces text models only"
    if getattr(config, "attention_window", None) is not None:  # Longformer, LED
        return (f"{name} reports its attention weights as bands around each token (one column per offset in its "
                "sliding window, plus global tokens), not as queries x keys: mha-viz cannot label them")
    parts = [key for key in NON_TEXT_CONFIGS if getattr(config, key, None) is not None]
    if parts:
        return (f"{name} is a multimodal model (its config has {', '.join(parts)}): mha-viz traces text models "
                "only; load its text model on its own")
    return None


def refuse_non_text(model: nn.Module) -> None:
    """ModelLoadError unless model is a text model that reads token ids through an embedding table."""
    reason = non_text_reason(model.config, type(model))
    try:
        embeddings = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        embeddings = None
    if reason is None and not isinstance(embeddings, nn.Embedding):
        reason = f"'{model.config.model_type}' has no token embedding table: mha-viz traces text models only"
    if reason is not None:
        raise ModelLoadError(f"Cannot open this model: {reason}.")
