"""Where a model's layers live when it is spread over several GPUs, through transformers/accelerate.

A model larger than one GPU is placed layer by layer (pipeline placement, the `device_map` of
transformers and accelerate): every decoder layer sits whole on one GPU, the hidden state moves
between GPUs at the boundaries (accelerate's hooks copy each module's inputs to its device), and the
GDN core of a layer runs on that layer's GPU. Two ways to choose the map:

- "auto": accelerate's own (`get_balanced_memory` + `infer_auto_device_map`, what transformers does
  for `device_map="auto"`), from each module's size and each GPU's free memory;
- "balanced": an explicit map, the decoder layers cut into contiguous, equally long runs, one per GPU
  (the embeddings on the first, the final norm and an untied lm_head on the last).

Either map is checked before any weight is allocated: it may name only the GPUs asked for (no CPU
or disk offload), and no GPU may receive more weights than it has free memory. A random-weight model
is built on the meta device, each module materialised on its GPU and initialised there (nothing the
size of the model ever exists on the host); a checkpoint is loaded by transformers with the map.
"""
from __future__ import annotations

from typing import Any, Mapping

from .models import ModelError

DEVICE_MAPS = ("none", "auto", "balanced")
GIB = 2 ** 30


def check_device_map(device_map, gpus=None, *, visible: int | None = None) -> list[int]:
    """The GPU indices a `device_map` request spreads the model over ([] for "none").

    `gpus` is how many GPUs to use (default: every visible one); `visible` the number of CUDA GPUs
    this process sees (default: torch's count). ModelError, one sentence, for an unknown map, a
    request for GPUs that are not there, or `gpus` without a map.
    """
    if device_map not in DEVICE_MAPS:
        raise ModelError(f"Unknown device map {device_map!r}; use {', '.join(DEVICE_MAPS)}.")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise ModelError(f"The number of GPUs must be a whole number of at least 1, got {gpus!r}.")
    if device_map == "none":
        if gpus is not None:
            raise ModelError("A number of GPUs needs a device map: pass --device-map auto or balanced.")
        return []
    if visible is None:
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ModelError(f"--device-map {device_map} spreads the model over CUDA GPUs, but this machine has "
                         "none visible; use --device-map none to run on one device.")
    wanted = visible if gpus is None else gpus
    if wanted > visible:
        raise ModelError(f"--device-map {device_map} asks for {wanted} GPUs but this machine has {visible} "
                         "visible (CUDA_VISIBLE_DEVICES limits them); ask for fewer.")
    return list(range(wanted))


# ---------------------------------------------------------------------------------- maps

def module_groups(model) -> tuple[list[str], list[str], list[str]]:
    """The names a device map assigns, in three groups: what runs before the decoder layers (the
    embeddings, the rotary table), the decoder layers in order, and what runs after them (the final
    norm, the lm_head). A tied lm_head shares the embeddings' weight, so it goes with them."""
    prefix = model.base_model_prefix
    base = getattr(model, prefix)
    first, layers, last = [], [], []
    for name, _ in base.named_children():
        if name == "layers":
            layers = [f"{prefix}.layers.{index}" for index in range(len(base.layers))]
        elif name == "norm":
            last.append(f"{prefix}.{name}")
        else:
            first.append(f"{prefix}.{name}")
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for name, _ in model.named_children():
        if name != prefix:
            (first if tied else last).append(name)
    return first, layers, last


def balanced_map(model, gpus: list[int]) -> dict[str, int]:
    """Decoder layer i on GPU gpus[i * len(gpus) // n_layers]: contiguous runs of equal length."""
    first, layers, last = module_groups(model)
    device_map = {name: gpus[0] for name in first}
    device_map.update({name: gpus[index * len(gpus) // len(layers)] for index, name in enumerate(layers)})
    device_map.update({name: gpus[-1] for name in last})
    return device_map


def auto_map(model, gpus: list[int], dtype, free: Mapping[int, int]) -> dict[str, Any]:
    """accelerate's map over `gpus`, each offered its `free` bytes and balanced between them."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory
    from accelerate.utils import modeling as accelerate_modeling

    keep = list(getattr(model, "_no_split_modules", None) or [])
    level = accelerate_modeling.logger.getEffectiveLevel()
    accelerate_modeling.logger.setLevel("ERROR")   # "device N is not available": the map is computed, not used, here
    try:
        memory = get_balanced_memory(model, max_memory={gpu: int(free[gpu]) for gpu in gpus},
                                     no_split_module_classes=keep, dtype=dtype)
        return dict(infer_auto_device_map(model, max_memory=memory, no_split_module_classes=keep, dtype=dtype))
    finally:
        accelerate_modeling.logger.setLevel(level)


def weights_per_gpu(model, device_map: Mapping[str, Any], dtype) -> dict[Any, int]:
    """Bytes of weights (parameters and buffers, in `dtype`) each device of the map receives."""
    from accelerate.utils import compute_module_sizes

    sizes = compute_module_sizes(model, dtype=dtype)
    totals: dict[Any, int] = {}
    for name, device in device_map.items():
        totals[device] = totals.get(device, 0) + sizes[name]
    return totals


def free_memory(gpus: list[int]) -> dict[int, int]:
    """Free bytes on each GPU now."""
    import torch

    return {gpu: torch.cuda.mem_get_info(gpu)[0] for gpu in gpus}


def plan(model, device_map: str, gpus: list[int], dtype, *, name: str,
         free: Mapping[int, int] | None = None) -> dict[str, Any]:
    """The checked map of `model` (built on the meta device) over `gpus`; ModelError when the model
    does not fit on them (accelerate would offload to the CPU or disk, or a GPU would overflow)."""
    free = dict(free_memory(gpus) if free is None else free)
    chosen = balanced_map(model, gpus) if device_map == "balanced" else auto_map(model, gpus, dtype, free)
    total = sum(weights_per_gpu(model, {n: 0 for n in chosen}, dtype).values())
    offloaded = sorted({str(device) for device in chosen.values() if device not in gpus})
    where = f"{len(gpus)} GPU(s) with {sum(free[g] for g in gpus) / GIB:,.1f} GiB free"
    if offloaded:
        raise ModelError(f"{name} ({total / GIB:,.1f} GiB of weights) does not fit on {where}: accelerate would "
                         f"put part of it on {' and '.join(offloaded)}; use more GPUs or a smaller model.")
    for gpu, needed in weights_per_gpu(model, chosen, dtype).items():
        if needed > free[gpu]:
            raise ModelError(f"{name}: the {device_map} map puts {needed / GIB:,.1f} GiB of weights on GPU {gpu}, "
                             f"which has {free[gpu] / GIB:,.1f} GiB free; use more GPUs or --device-map auto.")
    return chosen


# ---------------------------------------------------------------------------------- building

def meta_model(build, dtype):
    """`build()` (a model constructor) with every weight on the meta device (no memory), in `dtype`."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            return build()
    finally:
        torch.set_default_dtype(previous)


def _torch_device(device) -> Any:
    import torch

    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def materialise_random(model, device_map: Mapping[str, Any], *, seed: int):
    """A meta-device model made real where the map says, initialised there by transformers' own
    `_init_weights` (seeded), then dispatched by accelerate (hooks that move each module's inputs
    to its device). Its weights depend on the seed and on the map (each GPU draws its own)."""
    import torch

    for name, device in device_map.items():
        model.get_submodule(name).to_empty(device=_torch_device(device))
    left = [name for name, parameter in model.named_parameters() if parameter.is_meta]
    if left:
        raise ModelError(f"The device map leaves {len(left)} weight(s) unplaced ({left[0]}, ...).")
    torch.manual_seed(seed)
    model.initialize_weights()          # also recomputes the rotary tables that to_empty left blank
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    return dispatch(model, device_map)


def dispatch(model, device_map: Mapping[str, Any]):
    """accelerate's dispatch, as transformers calls it (the cache object is never moved by a hook)."""
    from accelerate import dispatch_model

    skip = getattr(model, "_skip_keys_device_placement", None)
    model = dispatch_model(model, device_map=dict(device_map), skip_keys=skip)
    model.hf_device_map = dict(device_map)
    return model


# ---------------------------------------------------------------------------------- summary

def layer_devices(model) -> list[str]:
    """The device of each decoder layer, in order (e.g. ["cuda:0", ..., "cuda:1"])."""
    base = getattr(model, model.base_model_prefix)
    return [str(next(layer.parameters()).device) for layer in base.layers]


def describe(model, gdn_layers: list[int]) -> list[dict]:
    """One row per device holding part of `model`: its decoder layers (GDN layers apart), the bytes
    of weights it holds, and for a GPU its name and total memory. Works for a model on one device."""
    devices = layer_devices(model)
    weights: dict[str, int] = {}
    for tensor in list(model.parameters()) + list(model.buffers()):
        key = str(tensor.device)
        weights[key] = weights.get(key, 0) + tensor.numel() * tensor.element_size()
    rows = []
    for device in sorted(weights, key=_device_order):
        layers = [index for index, where in enumerate(devices) if where == device]
        row = {"device": device, "layers": layers, "gdn_layers": [i for i in layers if i in set(gdn_layers)],
               "weights_gib": round(weights[device] / GIB, 3), "name": "CPU", "total_gib": None}
        if device.startswith("cuda"):
            import torch

            properties = torch.cuda.get_device_properties(torch.device(device))
            row.update(name=properties.name, total_gib=round(properties.total_memory / GIB, 1))
        rows.append(row)
    return rows


def peak_memory(rows: list[dict]) -> list[dict]:
    """`rows` (from `describe`) with each GPU's peak allocated memory since the last reset, GiB."""
    import torch

    out = []
    for row in rows:
        row = dict(row)
        if row["device"].startswith("cuda"):
            row["peak_gib"] = round(torch.cuda.max_memory_allocated(torch.device(row["device"])) / GIB, 2)
        out.append(row)
    return out


def layer_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5, 6] -> "0-2, 5-6": a device's layers in a line."""
    parts, start = [], None
    for index, layer in enumerate(layers):
        if start is None:
            start = layer
        if index + 1 == len(layers) or layers[index + 1] != layer + 1:
            parts.append(str(start) if start == layer else f"{start}-{layer}")
            start = None
    return ", ".join(parts) or "none"


def _device_order(device: str):
    kind, _, index = device.partition(":")
    return (kind != "cuda", int(index or 0), kind)
