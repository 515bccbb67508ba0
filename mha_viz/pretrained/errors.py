"""Why a pretrained model could not be loaded (every such error is a ModelLoadError), or could not be traced whole."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A pretrained model could not be loaded."""


class ModelNotInstalledError(ModelLoadError):
    """The package that ships the bundled model is not installed."""


class ModelIntegrityError(ModelLoadError):
    """The weights file does not have the expected sha256: refused, not loaded."""


class ModelConfigError(ModelLoadError):
    """The model's config.json is there but unreadable: not valid JSON (or not UTF-8, or not a JSON object)."""


class ModelDownloadError(ModelLoadError):
    """A hub model is not in the local cache and could not be downloaded."""


class InvalidModelNameError(ModelLoadError, ValueError):
    """The name is neither a local model folder nor a valid hub id (org/name)."""


class MixerSizeError(ValueError):
    """The mixing matrices a request asks for would take more than mha_viz.limits.MAX_MIXER_BYTES: refused before
    any is made (a mixer without heads, Mamba-1's or LFM2's, has one [T, T] matrix per channel)."""
