"""Every key the config schemas read, and the check that no other key reaches a run.

Hydra's structured configs refuse an unknown key given as `key=value`, but its own hint for that
error, `+key=value`, appends the key to the config, and `OmegaConf.to_object` then sets it as a
plain attribute on the dataclass that no code reads: `+learner.lr=1e-6` trained at the default
`learner.learning_rate` without a word. So the keys are checked here, against the schemas:

* `check_override_keys(overrides)`: the command line, before Hydra composes anything (an unknown
  key, with or without `+`, or an unknown preset of a config group);
* `check_composed_keys(cfg)`: the composed config, before it becomes an `AdarlConfig` (any key
  that slipped in another way, e.g. through the `adarl.evaluate` composition).

Both raise `UnknownKeyError` (a `ValueError`: the launcher reports it in one line, exit 2) naming
the key and the closest valid ones ("did you mean learner.learning_rate?"). Keys under a
dict-typed field (`task.reasoning_gym.config.*`, a generator's own keys) are open: the component
that reads them checks them.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The schema tree: a dataclass's fields by name; a nested dataclass (or a list of them) is a
# `Node`, a dict-typed field is open (`OPEN`), anything else a leaf (`LEAF`).
LEAF = "leaf"
OPEN = "open"


@dataclasses.dataclass(frozen=True)
class Node:
    children: Mapping[str, Node | str]
    is_list: bool = False  # a list of these records (`task.arithmetic.levels`)


class UnknownKeyError(ValueError):
    """A key no config schema reads, or a preset no config group holds; the message names the
    closest valid ones."""


def _unwrap_optional(annotation: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _entry(annotation: Any) -> Node | str:
    annotation = _unwrap_optional(annotation)
    if dataclasses.is_dataclass(annotation):
        return schema_tree(annotation)  # type: ignore[arg-type]
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping) or annotation in (dict, Any):
        return OPEN
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        item = _unwrap_optional(item)
        if dataclasses.is_dataclass(item):
            return dataclasses.replace(schema_tree(item), is_list=True)  # type: ignore[arg-type]
    return LEAF


@functools.cache
def schema_tree(schema: type) -> Node:
    """The keys of a config dataclass, recursively (`AdarlConfig` for the whole config)."""
    hints = typing.get_type_hints(schema)
    return Node({f.name: _entry(hints[f.name]) for f in dataclasses.fields(schema)})


def _root() -> Node:
    from adarl.config import AdarlConfig

    return schema_tree(AdarlConfig)


def all_keys(node: Node | None = None, prefix: str = "") -> list[str]:
    """Every dotted key of the schema (leaves and the records that hold them)."""
    node = node or _root()
    keys = []
    for name, child in node.children.items():
        path = f"{prefix}{name}"
        keys.append(path)
        if isinstance(child, Node):
            keys.extend(all_keys(child, f"{path}."))
    return keys


def _initials(name: str) -> str:
    return "".join(part[0] for part in name.split("_") if part)


def _closest_names(name: str, candidates: Sequence[str]) -> list[str]:
    """Candidates a person who typed `name` may have meant: the first kind of likeness that finds
    any, of the same initials (`lr` -> `learning_rate`), close spelling (`prompts_per_stepp` ->
    `prompts_per_step`), one name inside the other (`kl` -> `kl_coef`), looser spelling."""
    lowered = name.lower()
    tiers = (
        [c for c in candidates if len(lowered) > 1 and _initials(c) == lowered],
        difflib.get_close_matches(lowered, candidates, n=3, cutoff=0.75),
        [c for c in candidates if len(lowered) > 1 and (c.startswith(lowered) or lowered in c)],
        difflib.get_close_matches(lowered, candidates, n=3, cutoff=0.5),
    )
    return next((tier[:3] for tier in tiers if tier), [])


def suggestions(key: str, node: Node | None = None) -> list[str]:
    """The valid keys closest to the unknown dotted `key`."""
    root = node or _root()
    parts = key.split(".")
    current, prefix = root, ""
    for i, part in enumerate(parts):
        if current.is_list and part.isdigit():
            prefix += f"{part}."
            continue
        child = current.children.get(part)
        if child is None:
            rest = parts[i + 1 :]
            found = []
            for name in _closest_names(part, list(current.children)):
                candidate = ".".join([*filter(None, [prefix.rstrip(".")]), name, *rest])
                if not rest or _lookup(root, candidate.split(".")) is not None:
                    found.append(candidate)
            # The same name elsewhere: trainer.max_new_tokens -> rollout.max_new_tokens.
            leaf = parts[-1]
            found += [k for k in all_keys(root) if k.split(".")[-1] == leaf and k != key]
            return list(dict.fromkeys(found))[:4]
        if not isinstance(child, Node):
            return []  # a key below a leaf: the leaf itself is the nearest
        current, prefix = child, f"{prefix}{part}."
    return []


def _lookup(node: Node, parts: Sequence[str]) -> Node | str | None:
    """The schema entry at `parts` (list indices skipped), OPEN for anything under an open
    field, None where no field is."""
    current: Node | str = node
    for part in parts:
        if current == OPEN:
            return OPEN
        if not isinstance(current, Node):
            return None
        if current.is_list and part.isdigit():
            continue
        found = current.children.get(part)
        if found is None:
            return None
        current = found
    return current


def _either(options: Sequence[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return (
        " or ".join(options) if len(options) < 3 else f"{', '.join(options[:-1])} or {options[-1]}"
    )


def _documented_in(key: str) -> str:
    """The schema module that documents `key`'s area (adarl/config/__init__.py's table)."""
    from adarl.config import AdarlConfig

    area = key.split(".")[0]
    fields = {f.name: f for f in dataclasses.fields(AdarlConfig)}
    if area not in fields:
        return "adarl/config/"
    schema = _unwrap_optional(typing.get_type_hints(AdarlConfig)[area])
    module = inspect.getmodule(schema) if dataclasses.is_dataclass(schema) else None
    if module is None or module.__file__ is None:
        return "adarl/config/__init__.py"
    return f"adarl/config/{Path(module.__file__).name}"


def unknown_key_message(key: str, *, where: str = "") -> str:
    """One line: the key, why it is refused, the closest valid keys and where keys are
    documented."""
    close = suggestions(key)
    hint = f"; did you mean {_either(close)}?" if close else ""
    return (
        f"unknown key {key}{where}: no config field reads it{hint} (keys and their meaning: "
        f"{_documented_in(key)})"
    )


def check_key(key: str, *, where: str = "") -> None:
    """Raise `UnknownKeyError` unless `key` (dotted; list indices allowed) is a schema key."""
    if _lookup(_root(), key.split(".")) is None:
        raise UnknownKeyError(unknown_key_message(key, where=where))


def config_groups(config_dir: str | Path) -> dict[str, list[str]]:
    """The config groups of `config_dir` (its subdirectories) and the presets each holds."""
    return {
        entry.name: sorted(p.stem for p in entry.glob("*.yaml"))
        for entry in sorted(Path(config_dir).iterdir())
        if entry.is_dir() and not entry.name.startswith(("_", "."))
    }


def check_override_keys(overrides: Iterable[str], *, config_dir: str | Path) -> None:
    """Refuse, before Hydra composes anything, a command-line override whose key no schema reads
    (`key=value`, `+key=value`, `++key=value`) or that names a preset its config group does not
    hold (`task=jsnl`). Hydra's own keys (`hydra.*`), deletions (`~key`) and sweeps of presets
    are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = config_groups(config_dir)
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_hydra_override() or override.is_delete() or override.package:
            continue
        if key in groups:
            value = override.value()
            if isinstance(value, str) and value not in groups[key]:
                close = _closest_names(value, groups[key])
                hint = f"; did you mean {_either([f'{key}={c}' for c in close])}?" if close else ""
                raise UnknownKeyError(
                    f"{override.input_line}: adarl/conf/{key}/ holds no preset {value!r}{hint} "
                    f"(its presets: {', '.join(groups[key])})"
                )
            continue
        check_key(key, where=f" (in {override.input_line})")


def check_composed_keys(cfg: Any) -> None:
    """Refuse a key in the composed config (a `DictConfig`) that no schema field reads: what a
    `+key=value` override or a preset could add past Hydra's own check."""
    from omegaconf import DictConfig, ListConfig

    def walk(value: Any, node: Node | str, prefix: str) -> None:
        if node == OPEN or not isinstance(node, Node):
            return
        if isinstance(value, ListConfig) and node.is_list:
            for index in range(len(value)):
                item = value._get_node(index)
                walk(item, dataclasses.replace(node, is_list=False), f"{prefix}{index}.")
            return
        if not isinstance(value, DictConfig) or value._is_none() or value._is_missing():
            return
        for key in value:
            child = node.children.get(str(key))
            path = f"{prefix}{key}"
            if child is None:
                raise UnknownKeyError(unknown_key_message(path))
            walk(value._get_node(key), child, f"{path}.")

    walk(cfg, _root(), "")
