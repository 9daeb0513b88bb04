"""Loading Qwen3.5 models for analysis: the embedded default, a timing preset, local checkpoints.

Specs accepted by `load_model`:
- "default": `data/default-model/` when it holds a checkpoint (config.json + safetensors +
  tokenizer.json); until then a small seeded random-weight Qwen3.5, labelled "random weights".
- "qwen3.5-4b-shape": random weights in the Qwen3.5-4B shape (24 GDN + 8 attention layers), for
  timing on a GPU; its outputs mean nothing.
- "qwen3.5-122b-a10b-shape": random weights in the shape of Qwen3.5-122B-A10B's text stack (48 layers,
  256 experts): 122.1B parameters, 227 GiB in bf16, more than one H200 holds; for runs spread over
  several GPUs (`device_map`); its outputs mean nothing.
- a checkpoint directory under a configured root, or a Hugging Face cache id ("Qwen/Qwen3.5-4B")
  already in the local cache. Nothing is downloaded and `trust_remote_code` is never enabled.

Roots: `SPARSEGDN_MODEL_ROOTS` (os.pathsep-separated); default `data/` and the HF hub cache.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AnalysisError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = REPO_ROOT / "data" / "default-model"
ROOTS_ENV = "SPARSEGDN_MODEL_ROOTS"

# The text stacks we know how to patch: the dense Qwen3.5 models and the MoE ones (VLM checkpoints
# load as their text-only causal LM, which transformers maps for qwen3_5 / qwen3_5_moe).
SUPPORTED_MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
PRESETS = ("default", "qwen3.5-4b-shape", "qwen3.5-122b-a10b-shape")
SUPPORTED_TEXT = (
    "supported: 'default', 'qwen3.5-4b-shape', 'qwen3.5-122b-a10b-shape', a Qwen3.5 checkpoint directory "
    f"(model_type {', '.join(SUPPORTED_MODEL_TYPES)}) under the model roots, "
    "or the id of a Qwen3.5 model already in the local Hugging Face cache"
)


class ModelError(AnalysisError):
    """The model spec cannot be loaded; the message names what is supported."""


# ---------------------------------------------------------------------------------- tokenizers

# count_up_to tokenises long texts in pieces of about this many characters, cut after a newline or a
# space, and stops as soon as the pieces hold more tokens than the limit (plus a few per cut, where
# the pieces' tokens may differ from the whole text's): memory and time then follow the limit, not
# the text. Texts that stay under it are tokenised once more, whole, for the exact count.
PIECE_CHARS = 1 << 16
TOKENS_PER_CUT = 8


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255: the tokenizer of the random-weight models (no vocab files)."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def count_up_to(self, text: str, limit: int) -> int:
        """The token count when it is at most `limit`; otherwise a number above `limit`."""
        return len(text) if len(text) > limit else len(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and, for each, the (start, end) character span it came from."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for position, char in enumerate(text):
            encoded = char.encode("utf-8")
            ids.extend(encoded)
            offsets.extend([(position, position + 1)] * len(encoded))
        return ids, offsets


class HFTokenizer:
    """A Hugging Face fast tokenizer behind the same three methods as `ByteTokenizer`."""

    def __init__(self, tokenizer: Any):
        self.inner = tokenizer
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.inner(text, add_special_tokens=False)["input_ids"])

    def count_up_to(self, text: str, limit: int) -> int:
        """The token count when it is at most `limit`; otherwise a number above `limit`, found after
        tokenising not much more than `limit` tokens' worth of the text (see PIECE_CHARS)."""
        if len(text) <= PIECE_CHARS:
            return len(self.encode(text))
        total, cuts, start = 0, 0, 0
        while start < len(text):
            end = _piece_end(text, start)
            total += len(self.encode(text[start:end]))
            if total > limit + TOKENS_PER_CUT * cuts:
                return total
            start, cuts = end, cuts + 1
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(list(ids))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoded = self.inner(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoded["input_ids"]), [tuple(span) for span in encoded["offset_mapping"]]


def _piece_end(text: str, start: int) -> int:
    """End of the piece of `text` from `start`: after the last newline (else space) within PIECE_CHARS."""
    end = start + PIECE_CHARS
    if end >= len(text):
        return len(text)
    for separator in ("\n", " "):
        cut = text.rfind(separator, start + 1, end)
        if cut > start:
            return cut + 1
    return end


# ---------------------------------------------------------------------------------- records

@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str
    description: str
    random_weights: bool
    n_layers: int
    gdn_layers: list[int]
    head_pairs: int
    max_tokens: int
    device: str                 # where inputs go: the only device, or the first GPU of a device map
    dtype: str = "float32"
    extra: dict = field(default_factory=dict)
    device_map: str = "none"    # "none" (one device), "auto" or "balanced" (analysis/placement.py)
    placement: list = field(default_factory=list)   # placement.describe rows: layers and weights per device


@dataclass(frozen=True)
class ModelChoice:
    spec: str           # what to pass to load_model
    label: str          # what the UI shows
    description: str
    random_weights: bool


# ---------------------------------------------------------------------------------- configs

def default_random_config():
    """The small random-weight stand-in for the trained default: 3 GDN + 1 attention layer, HV = 2H."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=ByteTokenizer.vocab_size, hidden_size=128, intermediate_size=256,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, max_position_embeddings=131072, tie_word_embeddings=True,
    )


def qwen35_4b_shape_config():
    """Qwen3.5-4B's text stack: 32 layers (every 4th full attention), GDN H=16, HV=32, K=V=128."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
        num_attention_heads=16, num_key_value_heads=4, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, max_position_embeddings=262144,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
    )


def qwen35_122b_a10b_shape_config(num_hidden_layers: int = 48):
    """Qwen3.5-122B-A10B's text stack: 48 layers (every 4th full attention), hidden 3072, 256 experts
    of 1024 (8 routed + 1 shared per token), GDN H=16, HV=64, K=V=128; attention 32 query heads, 2 KV
    heads of 256. The sizes of Qwen/Qwen3.5-122B-A10B's published config.json (as read from public
    configs that reproduce it; no checkpoint was opened). Fewer layers keep every layer's real shape."""
    from transformers import Qwen3_5MoeTextConfig

    return Qwen3_5MoeTextConfig(
        vocab_size=248320, hidden_size=3072, num_hidden_layers=num_hidden_layers, num_attention_heads=32,
        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=64,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=256,
        num_experts_per_tok=8, moe_intermediate_size=1024, shared_expert_intermediate_size=1024,
        max_position_embeddings=262144, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
    )


# The random-weight presets of a real shape, for timing: spec -> (config, description).
SHAPE_PRESETS = {
    "qwen3.5-4b-shape": (
        qwen35_4b_shape_config,
        "Qwen3.5-4B shape (24 GDN + 8 attention layers) with RANDOM weights, for timing."),
    "qwen3.5-122b-a10b-shape": (
        qwen35_122b_a10b_shape_config,
        "Qwen3.5-122B-A10B shape (36 GDN + 12 attention layers, 256 experts; 122.1B parameters, 227 GiB in "
        "bf16: more than one H200) with RANDOM weights, for runs over several GPUs."),
}


# ---------------------------------------------------------------------------------- loading

def model_roots(roots: list[Path | str] | None = None) -> list[Path]:
    """The directories checkpoints may be loaded from (resolved)."""
    if roots is None:
        raw = os.environ.get(ROOTS_ENV, "").strip()
        if raw:
            roots = [part for part in raw.split(os.pathsep) if part]
        else:
            from huggingface_hub import constants

            roots = [REPO_ROOT / "data", constants.HF_HUB_CACHE]
    return [Path(root).expanduser().resolve() for root in roots]


def _resolve_dtype(dtype: Any, device: str):
    import torch

    if dtype is None:
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
                 "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16}
        if dtype not in names:
            raise ModelError(f"Unknown dtype {dtype!r}: use bf16 or fp32.")
        return names[dtype]
    return dtype


DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")
DEVICES_TEXT = "use auto (a CUDA GPU when present, else the CPU), cpu, or cuda (cuda:N for GPU N)"


def check_device_name(name) -> str:
    """`name` when it is one of the device names runs accept; ModelError otherwise (mps and meta too:
    the models and kernels here run on CUDA or the CPU only)."""
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise ModelError(f"Unknown device {name!r}; {DEVICES_TEXT}.")
    return name


def resolve_device(name: str) -> str:
    """The torch device a run uses for `name` ('auto' picks CUDA when present); ModelError when the
    name is unknown or names a GPU this machine does not have."""
    import torch

    check_device_name(name)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelError(f"Device {name!r} was asked for but no CUDA GPU is available; use cpu.")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ModelError(f"Device {name!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s).")
    return name


def wrap_model(model, tokenizer, *, name, description, random_weights, device, dtype,
               device_map: str = "none") -> LoadedModel:
    from . import placement

    config = model.config
    layer_types = list(config.layer_types)
    gdn_layers = [i for i, kind in enumerate(layer_types) if kind == "linear_attention"]
    if not gdn_layers:
        raise ModelError(f"{name} has no Gated DeltaNet (linear_attention) layers; {SUPPORTED_TEXT}.")
    model.eval()
    return LoadedModel(
        model=model, tokenizer=tokenizer, name=name, description=description,
        random_weights=random_weights, n_layers=len(layer_types), gdn_layers=gdn_layers,
        head_pairs=int(config.linear_num_value_heads), max_tokens=int(config.max_position_embeddings),
        device=str(device), dtype=str(dtype).removeprefix("torch."), device_map=device_map,
        placement=placement.describe(model, gdn_layers),
    )


def random_model(config, *, seed: int, device: str, dtype):
    import torch
    from transformers import Qwen3_5ForCausalLM

    # Build directly on the target device and dtype: a 4B-shape model in fp32 on the CPU first
    # would need 16 GB of host memory for nothing.
    with torch.device(device):
        torch.manual_seed(seed)
        previous = torch.get_default_dtype()
        try:
            torch.set_default_dtype(dtype)
        except TypeError:   # a torch that only takes float32/64 defaults: build in fp32, cast below
            pass
        try:
            model = Qwen3_5ForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
    return model.to(device=device, dtype=dtype)


def placed_random_model(config, *, seed: int, dtype, device_map: str, gpus: list[int], name: str):
    """A random-weight model built on the meta device and materialised on `gpus` by the checked
    `device_map` (analysis/placement.py); nothing of its size is allocated on the host."""
    from transformers import AutoModelForCausalLM

    from . import placement

    model = placement.meta_model(lambda: AutoModelForCausalLM.from_config(config), dtype)
    chosen = placement.plan(model, device_map, gpus, dtype, name=name)
    return placement.materialise_random(model, chosen, seed=seed)


def segment_inputs(config, start: int, end: int, device) -> dict:
    """Keyword arguments for `model.model(...)` on tokens start..end of a prefill that carries a cache.

    With no attention layer (every layer Gated DeltaNet, as in `training/train.py --gdn-only`),
    transformers 5.17 cannot run a prefill with a cache: its position and mask code asks the cache for
    its length, which raises for a cache of linear-attention layers only. Such a model is given its
    positions here and no masks (a Gated DeltaNet layer takes none without padding); a model with
    attention layers gets nothing and transformers' own path.
    """
    import torch

    if "full_attention" in getattr(config, "layer_types", ["full_attention"]):
        return {}
    return {"position_ids": torch.arange(start, end, device=device)[None],
            "attention_mask": {"full_attention": None, "linear_attention": None}}


def slow_gdn_decay(model, low: float = 0.002, high: float = 0.05) -> None:
    """Set every GDN head's decay rate A to a spread in [low, high].

    transformers initialises A uniformly in (0.01, 16): most heads then forget within a few tokens,
    every event looks unimportant and a random-weight model shows no SparseGDN error at all. Slow
    decays make skipped events visible, as in trained models whose heads keep long memories.
    """
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("A_log"):
                rates = torch.linspace(low, high, parameter.numel(), dtype=torch.float32)
                parameter.copy_(rates.log().to(parameter.dtype))


def _has_checkpoint(directory: Path) -> bool:
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors"))


def _read_config(directory: Path) -> dict:
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelError(f"{directory} has no readable config.json ({error}); {SUPPORTED_TEXT}.") from None
    if not isinstance(config, dict):
        raise ModelError(f"{directory}/config.json is not a JSON object; {SUPPORTED_TEXT}.")
    return config


def _read_model_type(directory: Path) -> str:
    return str(_read_config(directory).get("model_type", ""))


def _load_tokenizer(directory: Path):
    from transformers import PreTrainedTokenizerFast

    tokenizer_file = directory / "tokenizer.json"
    if tokenizer_file.is_file():
        # The tokenizer file is data (a BPE vocabulary), never code: no remote code path exists.
        return HFTokenizer(PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file)))
    raise ModelError(f"{directory} has no tokenizer.json; a Qwen3.5 checkpoint directory needs one.")


def _load_checkpoint(directory: Path, *, name: str, device: str, dtype, device_map: str = "none",
                     gpus: list[int] | None = None) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM

    from . import checkpoints
    from transformers.utils import logging as transformers_logging

    # The CLI's stderr is its own progress bar and one-line errors; transformers' loading bar is noise.
    transformers_logging.disable_progress_bar()
    config = _read_config(directory)
    model_type = str(config.get("model_type", ""))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelError(f"{name} is a {model_type or 'unknown'!r} model, not Qwen3.5; {SUPPORTED_TEXT}.")
    # Spread over GPUs, each GPU's share is checked against its free memory by placement.plan instead.
    checkpoints.check_before_building(config, directory, name=name, device=None if gpus else device,
                                      bytes_per_parameter=torch.empty((), dtype=dtype).element_size())
    tokenizer = _load_tokenizer(directory)
    vocabulary = checkpoints.text_config(config).get("vocab_size")
    if vocabulary is not None and tokenizer.vocab_size > vocabulary:
        raise ModelError(f"{name}: tokenizer.json has {tokenizer.vocab_size:,} tokens but the model's vocabulary "
                         f"holds {vocabulary:,}; the tokenizer does not belong to this model.")
    placed = {}
    if gpus:
        from transformers import AutoConfig

        from . import placement

        built = AutoConfig.from_pretrained(str(directory), trust_remote_code=False, local_files_only=True)
        skeleton = placement.meta_model(lambda: AutoModelForCausalLM.from_config(built), dtype)
        placed = {"device_map": placement.plan(skeleton, device_map, gpus, dtype, name=name)}
    try:
        model, report = AutoModelForCausalLM.from_pretrained(
            str(directory), dtype=dtype, trust_remote_code=False, local_files_only=True,
            output_loading_info=True, **placed)
    except RuntimeError as error:      # transformers: a weight's shape differs from the config's
        raise ModelError(f"Could not load {name}: its weights do not match config.json's sizes "
                         f"({str(error).splitlines()[0]})") from None
    except (OSError, ValueError, KeyError) as error:
        raise ModelError(f"Could not load {name}: {error}") from None
    checkpoints.check_loading_report(report, name)
    if not gpus:
        model = model.to(device)
    count = sum(p.numel() for p in model.parameters())
    size = f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.2f}M"
    kinds = getattr(model.config.get_text_config(), "layer_types", None) or []
    attention = sum(kind != "linear_attention" for kind in kinds)
    layers = (f", {len(kinds)} layers: {len(kinds) - attention} Gated DeltaNet, {attention} attention" if kinds else "")
    description = f"{name} ({model_type}, {size} parameters{layers})"
    return wrap_model(model, tokenizer, name=name, description=description, random_weights=False,
                      device=device, dtype=dtype, device_map=device_map)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _cached_snapshot(repo_id: str, roots: list[Path]) -> Path | None:
    """The snapshot of a hub id in a hub-cache root (models--org--name/), or None; never downloads."""
    from huggingface_hub import snapshot_download

    for root in roots:
        if not (root / f"models--{repo_id.replace('/', '--')}").is_dir():
            continue
        try:
            return Path(snapshot_download(repo_id, cache_dir=str(root), local_files_only=True))
        except Exception:  # noqa: BLE001 - any failure means "not usable from this cache"
            continue
    return None


def load_model(spec: str, *, device: str = "cpu", dtype=None, roots=None, device_map: str = "none",
               gpus: int | None = None) -> LoadedModel:
    """Load a Qwen3.5 model by spec (see the module docstring); raises `ModelError`.

    `device_map` "auto" or "balanced" spreads the model's layers over `gpus` GPUs (default: every
    visible one) through transformers/accelerate (analysis/placement.py); `device` must then be
    auto or cuda. "none" puts the whole model on `device`.
    """
    from . import placement

    spread = placement.check_device_map(device_map, gpus)
    if spread:
        check_device_name(device)
        if device not in ("auto", "cuda"):
            raise ModelError(f"--device {device} and --device-map {device_map} disagree: a device map places "
                             "the model on the GPUs itself; leave --device at auto.")
        device = f"cuda:{spread[0]}"
    device = resolve_device(device)
    torch_dtype = _resolve_dtype(dtype, device)
    spec = (spec or "").strip()
    where = {"device": device, "dtype": torch_dtype, "device_map": device_map}

    def random(config, *, seed: int, name: str):
        if spread:
            return placed_random_model(config, seed=seed, dtype=torch_dtype, device_map=device_map,
                                       gpus=spread, name=name)
        return random_model(config, seed=seed, device=device, dtype=torch_dtype)

    if spec == "default":
        if _has_checkpoint(DEFAULT_MODEL_DIR):
            loaded = _load_checkpoint(DEFAULT_MODEL_DIR, name="default", device=device, dtype=torch_dtype,
                                      device_map=device_map, gpus=spread)
            loaded.description = "Embedded default: " + loaded.description
            return loaded
        model = random(default_random_config(), seed=0, name="default (random weights)")
        slow_gdn_decay(model)
        return wrap_model(
            model, ByteTokenizer(), name="default (random weights)",
            description=("Small Qwen3.5 (3 GDN + 1 attention layer) with seeded RANDOM weights and slow "
                         "GDN decays: a stand-in until the trained default lands; its text predictions "
                         "mean nothing."),
            random_weights=True, **where,
        )
    if spec in SHAPE_PRESETS:
        make_config, description = SHAPE_PRESETS[spec]
        if spec == "qwen3.5-122b-a10b-shape" and not spread:
            # Built whole on one device it would exhaust it (or the host) before failing.
            raise ModelError("qwen3.5-122b-a10b-shape holds 227 GiB of weights in bf16, more than one device; "
                             "load it with --device-map auto or balanced over two or more large GPUs.")
        model = random(make_config(), seed=0, name=spec)
        return wrap_model(model, ByteTokenizer(), name=f"{spec} (random weights)", description=description,
                          random_weights=True, **where)
    if not spec:
        raise ModelError(f"No model given; {SUPPORTED_TEXT}.")
    checkpoint = {"device": device, "dtype": torch_dtype, "device_map": device_map, "gpus": spread}
    allowed = model_roots(roots)
    path = Path(spec).expanduser()
    if path.exists():
        resolved = path.resolve()
        if not _inside(resolved, allowed):
            raise ModelError(
                f"{spec} is outside the model roots ({', '.join(map(str, allowed))}); add its folder "
                f"to {ROOTS_ENV} to allow it."
            )
        if not resolved.is_dir() or not _has_checkpoint(resolved):
            raise ModelError(f"{spec} is not a checkpoint directory (config.json + *.safetensors); {SUPPORTED_TEXT}.")
        return _load_checkpoint(resolved, name=spec, **checkpoint)
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        snapshot = _cached_snapshot(spec, allowed)
        if snapshot is not None:
            return _load_checkpoint(snapshot, name=spec, **checkpoint)
        raise ModelError(f"{spec} is not in a Hugging Face cache under the model roots (nothing is "
                         f"downloaded); {SUPPORTED_TEXT}.")
    raise ModelError(f"Unknown model {spec!r}; {SUPPORTED_TEXT}.")


def list_models(roots=None) -> list[ModelChoice]:
    """What the UI offers: the presets, checkpoint directories under the roots, cached hub models."""
    choices = []
    if _has_checkpoint(DEFAULT_MODEL_DIR):
        choices.append(ModelChoice("default", "Default (embedded, trained)",
                                   "The small Qwen3.5 trained for this app, every layer Gated DeltaNet (data/default-model).", False))
    else:
        choices.append(ModelChoice("default", "Default (random weights)",
                                   "Small random-weight Qwen3.5 until the trained default lands.", True))
    choices.append(ModelChoice("qwen3.5-4b-shape", "Qwen3.5-4B shape (random weights)",
                               "For GPU timing only; outputs mean nothing.", True))
    seen = {DEFAULT_MODEL_DIR.resolve()}
    for root in model_roots(roots):
        if not root.is_dir():
            continue
        if root.name == "hub" or (root / "models--").exists() or any(root.glob("models--*")):
            choices.extend(_cached_choices(root))
            continue
        for config_file in sorted(root.glob("*/config.json")) + sorted(root.glob("*/*/config.json")):
            directory = config_file.parent.resolve()
            if directory in seen or not _has_checkpoint(directory):
                continue
            seen.add(directory)
            if _read_model_type_quiet(directory) in SUPPORTED_MODEL_TYPES:
                choices.append(ModelChoice(str(directory), directory.name, f"Checkpoint at {directory}", False))
    return choices


def _read_model_type_quiet(directory: Path) -> str:
    try:
        return _read_model_type(directory)
    except ModelError:
        return ""


def _cached_choices(cache: Path) -> list[ModelChoice]:
    choices = []
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/", 1)
        for snapshot in sorted((repo / "snapshots").glob("*")):
            if _has_checkpoint(snapshot) and _read_model_type_quiet(snapshot) in SUPPORTED_MODEL_TYPES:
                choices.append(ModelChoice(repo_id, repo_id, f"Hugging Face cache: {repo_id}", False))
                break
    return choices
