"""Trained layers shipped with the package, so that the default view of trained weights is instant.

    trained_layer(task, num_heads, d_model, seed, steps)  the shipped layer when there is one, else train()
The shipped files (precomputed/*.npz) are what train() gives for PRECOMPUTED_GRID; each is checked
against its sha256 in SHA256 before it is used. scripts/precompute_trained_layers.py writes them
(and with --check retrains them and compares).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..variants import LayerVariant
from .layer import TrainedLayer
from .tasks import DEFAULT_TASK
from .trainer import train

FOLDER = Path(__file__).parent / "precomputed"
DEFAULT_STEPS = 600
# The default view's grid: every h the head slider offers at d_model = 64, the default task, seed 0.
PRECOMPUTED_GRID = tuple((DEFAULT_TASK, h, 64, 0, DEFAULT_STEPS) for h in (1, 2, 4, 8, 16))
SHA256 = {  # file name -> sha256, as scripts/precompute_trained_layers.py printed them
    "prev-first-h1-d64-seed0-steps600.npz": "e00f9270abba204887bbc1cb0b6bb17f5ef29428b86fcc07f1ce23a45bb63ab4",
    "prev-first-h2-d64-seed0-steps600.npz": "30b19e760a1c46be603f55846af2190cc9f1d6d462e0bd72476f4a54b28281bd",
    "prev-first-h4-d64-seed0-steps600.npz": "14abf1736ddab71b65a85bd1f6dffc21e6ccdef3697050a33aae8275f83398b2",
    "prev-first-h8-d64-seed0-steps600.npz": "0c1965f10b21d0ecb9d01d1623259c45e5b59f40d62695786ea03883082f6704",
    "prev-first-h16-d64-seed0-steps600.npz": "258f7c78b28a412c513e80da0788704018f4f01c7b3067df62c044cb923ade74",
}


def file_name(task: str, num_heads: int, d_model: int, seed: int, steps: int) -> str:
    return f"{task}-h{num_heads}-d{d_model}-seed{seed}-steps{steps}.npz"


def layer_to_npz(layer: TrainedLayer) -> bytes:
    """The layer as .npz bytes: state/<name> arrays, loss, accuracy, scores and an info JSON string."""
    info = {"task": layer.task, "num_heads": layer.num_heads, "d_model": layer.d_model, "seed": layer.seed,
            "steps": layer.steps, "relations": list(layer.relations)}
    if layer.variant != LayerVariant() or layer.diversity:  # the MHA files keep the info they always had
        info |= {"variant": {"kind": layer.variant.kind, **layer.variant.params()}, "diversity": layer.diversity,
                 "diversity_kind": layer.diversity_kind}
    arrays = {f"state/{name}": a for name, a in layer.state.items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, loss=np.array(layer.loss), accuracy=layer.accuracy, scores=layer.scores,
             info=np.array(json.dumps(info)))
    return buffer.getvalue()


def layer_from_npz(data: bytes) -> TrainedLayer:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        info = json.loads(str(npz["info"]))
        state = {name.removeprefix("state/"): npz[name] for name in npz.files if name.startswith("state/")}
        return TrainedLayer(info["task"], info["num_heads"], info["d_model"], info["seed"], info["steps"],
                            tuple(info["relations"]), float(npz["loss"]), npz["accuracy"], npz["scores"], state,
                            LayerVariant(**info.get("variant", {})), float(info.get("diversity", 0.0)),
                            info.get("diversity_kind", "outputs"))


def precomputed_layer(task: str, num_heads: int, d_model: int, seed: int, steps: int) -> TrainedLayer | None:
    """The shipped layer for these arguments, or None; ValueError if its file does not match its sha256."""
    name = file_name(task, num_heads, d_model, seed, steps)
    path = FOLDER / name
    if name not in SHA256 or not path.is_file():
        return None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != SHA256[name]:
        raise ValueError(f"{path} does not match its sha256: the file is corrupted; reinstall mha-viz")
    return layer_from_npz(data)


def trained_layer(
    task: str, num_heads: int, d_model: int, seed: int = 0, steps: int = DEFAULT_STEPS,
    *, on_step: Callable[[int], None] | None = None, variant: LayerVariant | None = None, diversity: float = 0.0,
    diversity_kind: str = "outputs",
) -> TrainedLayer:
    """The layer train() ends with for these arguments: shipped when it is in PRECOMPUTED_GRID (multi-head attention,
    no diversity penalty), else trained now (on_step(step) after every step)."""
    if (variant is None or variant == LayerVariant()) and not diversity:
        shipped = precomputed_layer(task, num_heads, d_model, seed, steps)
        if shipped is not None:
            return shipped
    return train(task, num_heads, d_model, steps, seed, on_step=on_step, variant=variant, diversity=diversity,
                 diversity_kind=diversity_kind).layer
