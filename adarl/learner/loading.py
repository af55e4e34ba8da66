"""How a learner rank reads its model: the safetensors of a local directory, ZeRO-3-partitioned.

Under ZeRO-3 a local checkpoint is loaded partitioned (`load_partitioned`: each rank builds and
reads only its share), so no rank ever holds the whole model; the learner loads anything else
whole (`adarl.learner.engine.load_scorer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def checkpoint_files(path: str) -> list[Path]:
    """The safetensors files of a local model directory ([] for a hub name or other formats)."""
    directory = Path(path)
    return sorted(directory.glob("*.safetensors")) if directory.is_dir() else []


def load_partitioned(
    path: str,
    files: Sequence[Path],
    *,
    dtype: torch.dtype,
    deepspeed_config: dict[str, Any],
) -> Any:
    """The model of `path`, built and loaded ZeRO-3-partitioned: no rank holds all of it.

    The model is constructed under `deepspeed.zero.Init`, which partitions each parameter as it
    is created (without random initialisation, and on the rank's own device), then every rank
    reads from the memory-mapped safetensors only the elements of its own partition: ZeRO-3 keeps
    elements [r·s, (r+1)·s) of a flattened parameter on partition rank r
    (deepspeed/runtime/zero/partition_parameters.py, `_partition_param`). No gather, no
    collective, no full tensor: peak memory per rank is its share plus the module being built,
    where loading whole and partitioning in `deepspeed.initialize` first moves the whole model
    to every rank's device (`python -m adarl.bench scaling`). Every rank calls it.
    """
    import deepspeed
    import torch.distributed as dist
    from deepspeed.runtime.zero.partition_parameters import DeepSpeedTensorOverride
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(path)
    # Tensors keep the dtypes the model's own code gives them (parameters: `dtype`; buffers
    # computed in fp32, such as rotary inv_freq, stay fp32, as in `from_pretrained`): only the
    # device is overridden. The partition dtype comes from the config's bf16 flag (DeepSpeed
    # 0.19.8 ignores an explicit `dtype=` on accelerators without fp16, such as CPU).
    with (
        no_init_weights(),
        deepspeed.zero.Init(
            config_dict_or_path=deepspeed_config,
            tensor_overrides=[DeepSpeedTensorOverride.device],
        ),
    ):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()
    location: dict[str, Path] = {}  # tensor name -> file (headers only)
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            location.update(dict.fromkeys(handle.keys(), file))
    names_of: dict[int, list[str]] = {}  # tied parameters appear under several names
    params: dict[int, torch.nn.Parameter] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
        params[id(param)] = param
    missing = [names[0] for names in names_of.values() if not set(names) & set(location)]
    if missing:
        raise ValueError(
            f"{path}: no checkpoint tensor for {missing[:5]}{'...' if len(missing) > 5 else ''} "
            "while loading it ZeRO-3-partitioned (renamed checkpoint keys?); use "
            "learner.zero_stage=2 for this model"
        )
    handles = {file: safe_open(str(file), framework="pt") for file in files}
    with torch.no_grad():
        for key, param in params.items():
            source = next(n for n in names_of[key] if n in location)
            part = param.ds_tensor
            size = int(part.ds_numel)
            start = size * dist.get_rank(group=param.ds_process_group)
            end = min(start + size, int(param.ds_numel))
            if start < end:
                flat = _read_flat_range(handles[location[source]], source, start, end)
                part[: end - start].copy_(flat.to(part.dtype))
    handles.clear()
    return model


def _read_flat_range(handle: Any, name: str, start: int, end: int) -> torch.Tensor:
    """Elements [start, end) of tensor `name` flattened, reading only the rows that hold them."""
    view = handle.get_slice(name)
    shape = list(view.get_shape())
    if not shape:
        return handle.get_tensor(name).reshape(-1)[start:end]
    row = 1
    for size in shape[1:]:
        row *= int(size)
    first, last = start // row, -(-end // row)
    rows = view[first:last]
    return rows.reshape(-1)[start - first * row : end - first * row]
