"""What a checkpoint directory must show before its model is built, and after its weights are read.

Before (nothing allocated yet): every size in config.json a whole number within a sane bound; a
lower bound on the parameter count the config describes (embeddings + MLPs) no larger than what the
safetensors files hold (read from their headers, no weights loaded) and no larger than the memory
of the device. A config of 100,000 layers, or a vocabulary of 1e9, is refused here in milliseconds.

After: transformers' own loading report. A weight the model expects and the files lack would be
left at its random initialisation, and the run reported as a trained model's; that is refused, as
is a weight whose shape differs from the config's.
"""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from .models import ModelError

# config.json fields: the largest value accepted, far above any released model's.
SIZE_BOUNDS = {
    "num_hidden_layers": 1024, "hidden_size": 1 << 16, "intermediate_size": 1 << 20, "vocab_size": 1 << 22,
    "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096,
    "linear_num_key_heads": 1024, "linear_num_value_heads": 1024, "linear_key_head_dim": 4096,
    "linear_value_head_dim": 4096, "linear_conv_kernel_dim": 64, "max_position_embeddings": 1 << 24,
    "num_experts": 4096, "num_experts_per_tok": 4096, "moe_intermediate_size": 1 << 20,
    "shared_expert_intermediate_size": 1 << 20,
}
# Weights may be fewer than the config's parameters (packed or pruned); beyond this factor they cannot match.
PARAMETER_SLACK = 1.5
HEADER_LIMIT = 100 << 20   # a safetensors header longer than this is not a real one


def text_config(config: dict) -> dict:
    """The language model's part of a config.json (a VLM checkpoint nests it under text_config)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def check_sizes(config: dict, name: str) -> None:
    """Every size field present is a whole number in 1..its bound; ModelError names the first that is not."""
    text = text_config(config)
    for field, bound in SIZE_BOUNDS.items():
        if field not in text:
            continue
        value = text[field]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            raise ModelError(f"{name}: config.json's {field} is {value!r}, not a size this app can build "
                             f"(a whole number from 1 to {bound:,}); the checkpoint is damaged or not a Qwen3.5.")


def parameter_lower_bound(config: dict) -> int:
    """Parameters the config describes at least: token embeddings and every layer's MLP (or experts)."""
    text = text_config(config)
    hidden = text.get("hidden_size", 0)
    if text.get("num_experts"):
        mlp = text["num_experts"] * 3 * hidden * text.get("moe_intermediate_size", 0)
    else:
        mlp = 3 * hidden * text.get("intermediate_size", 0)
    return text.get("vocab_size", 0) * hidden + text.get("num_hidden_layers", 0) * mlp


def stored_parameters(directory: Path) -> int:
    """Elements in the safetensors files of `directory`, from their headers (no weight is read)."""
    total = 0
    for path in sorted(directory.glob("*.safetensors")):
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8).ljust(8, b"\0"))
            if not 0 < length <= HEADER_LIMIT:
                raise ModelError(f"{path.name} is not a safetensors file (header of {length:,} bytes).")
            try:
                header = json.loads(handle.read(length))
                total += sum(math.prod(entry["shape"]) for key, entry in header.items() if key != "__metadata__")
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ModelError(f"{path.name} has a damaged safetensors header.") from None
    return total


def free_memory_bytes(device: str) -> int | None:
    """Memory a model could take on `device` now (None when unknown)."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_before_building(config: dict, directory: Path, *, name: str, bytes_per_parameter: int,
                          device: str | None) -> None:
    """Sizes sane, covered by the weights on disk, and within the device's free memory (device None:
    a model spread over GPUs, whose share on each is checked by analysis/placement.py)."""
    check_sizes(config, name)
    needed = parameter_lower_bound(config)
    stored = stored_parameters(directory)
    if needed > PARAMETER_SLACK * stored:
        raise ModelError(f"{name}: config.json describes at least {needed:,} parameters but its weights hold "
                         f"{stored:,}; the config does not belong to these weights.")
    free = None if device is None else free_memory_bytes(device)
    if free is not None and needed * bytes_per_parameter > free:
        raise ModelError(f"{name} needs at least {needed * bytes_per_parameter / 2 ** 30:.1f} GiB on {device}, "
                         f"which has {free / 2 ** 30:.1f} GiB free; use a smaller model or another device.")


def check_loading_report(report: dict, name: str) -> None:
    """Refuse a model that transformers built with weights the files did not have."""
    missing = sorted(report.get("missing_keys") or ())
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ModelError(f"{name} lacks {len(missing)} weight(s) the model needs ({shown}); they would run on "
                         "random values. Use a complete checkpoint.")
    mismatched = sorted(str(key) for key in report.get("mismatched_keys") or ())
    if mismatched:
        raise ModelError(f"{name}: {len(mismatched)} weight(s) differ in shape from config.json "
                         f"({', '.join(mismatched[:3])}); the config does not belong to these weights.")
