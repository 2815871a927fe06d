"""Type checks of config values against the annotations of what they configure, before anything is built.

Hydra parses `key=abc` as a string and `key=2.5` as a float whatever the key means, so a wrong type would
otherwise surface deep inside the code as a TypeError, or, for flags, be taken as true. Every value is checked
against the annotation of the constructor argument, dataclass field or spec entry it fills; annotations this
module cannot judge (classes, callables) are accepted and left to the constructor.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from sparseprune.errors import UserError

TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
PLURAL_NAMES = {bool: "flags", int: "integers", float: "numbers", str: "strings"}
UNJUDGED = object()  # an annotation member this module cannot check


def _member_accepts(value: Any, member: Any) -> bool | object:
    """Whether `value` fits one member of an annotation's union, or UNJUDGED."""
    if member is Any:
        return True
    if member is type(None):
        return value is None
    if member is bool:
        return isinstance(value, bool)
    if member in (int, float):  # an integer fills a float; a flag fills neither
        return isinstance(value, int if member is int else (int, float)) and not isinstance(value, bool)
    if member is str:  # Hydra parses `ckpt=123` as an int: any scalar but a flag names a string
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    origin = typing.get_origin(member)
    if origin is typing.Literal:
        return value in typing.get_args(member)
    if origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple, ListConfig)):
            return False
        item_type = next(iter(typing.get_args(member)), Any)
        return all(_member_accepts(item, item_type) is not False for item in value)
    if origin in (dict, Mapping):
        return isinstance(value, (dict, DictConfig))
    return UNJUDGED


def _members(annotation: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _describe(annotation: Any) -> str:
    names = []
    for member in _members(annotation):
        if typing.get_origin(member) is typing.Literal:
            names.append("one of " + ", ".join(repr(v) for v in typing.get_args(member)))
        elif typing.get_origin(member) in (list, tuple, Sequence):
            item_type = next(iter(typing.get_args(member)), None)
            names.append(f"a list of {PLURAL_NAMES[item_type]}" if item_type in PLURAL_NAMES else "a list")
        else:
            names.append(TYPE_NAMES.get(member, str(member)))
    return " or ".join(names)


def check_value(key: str, value: Any, annotation: Any) -> None:
    """Raise UserError naming `key` when `value` fits none of the annotation's members (and all were judged)."""
    verdicts = [_member_accepts(value, member) for member in _members(annotation)]
    if any(verdict is not False for verdict in verdicts):
        return
    shown = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
    raise UserError(f"{key} must be {_describe(annotation)}, got {shown!r}")


def check_fields(values: Mapping[str, Any], hints: Mapping[str, Any], prefix: str) -> None:
    """Every entry of `values` that has a hint, checked against it; `prefix` is the config path shown."""
    for name, value in values.items():
        if name in hints:
            check_value(f"{prefix}{name}", value, hints[name])


def dataclass_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls)}


def check_dataclass(instance: Any, prefix: str) -> None:
    """Every field of a dataclass built from config values, checked against its annotation."""
    hints = dataclass_hints(type(instance))
    check_fields({name: getattr(instance, name) for name in hints}, hints, prefix)


def constructor_hints(cls: type) -> dict[str, Any]:
    """Annotated arguments of `cls.__init__` and of the base constructors it passes `**kwargs` on to."""
    hints: dict[str, Any] = {}
    for klass in reversed(inspect.getmro(cls)):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            found = typing.get_type_hints(init)
        except Exception:  # forward references a library never resolves: nothing to check against
            continue
        hints |= {name: hint for name, hint in found.items() if name != "return"}
    return hints


def check_targets(cfg: DictConfig, prefix: str = "") -> None:
    """Every `_target_` node under `cfg` (data, model, trainer, callbacks, loggers), checked against its
    constructor's annotations."""
    for key, node in _resolvable_items(cfg):
        if not isinstance(node, DictConfig):
            continue
        path = f"{prefix}{key}."
        if "_target_" not in node:
            check_targets(node, path)
            continue
        target = _import_target(str(node._target_))
        if isinstance(target, type):
            arguments = {name: value for name, value in _resolvable_items(node) if not name.startswith("_")}
            check_fields(arguments, constructor_hints(target), path)


def _resolvable_items(node: DictConfig) -> Iterator[tuple[str, Any]]:
    """A node's entries whose values are set and resolve here: a required `???` is named where it is read, and
    Hydra's runtime values do not exist when a sweep composes its runs."""
    for name in node:
        if OmegaConf.is_missing(node, name):
            continue
        try:
            yield str(name), node[name]
        except InterpolationResolutionError:
            continue


def _import_target(target: str) -> Any:
    """The class a `_target_` names, or None: an import error is left to instantiate, which names it."""
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception:
        return None


TRAIN_KEYS = {"seed": int, "test": bool, "init_ckpt": str | None, "ckpt_path": str | None, "task_name": str}
EXPORT_KEYS = {
    "ckpt": str, "out_dir": str | None, "device": str, "dtype": str, "batch_size": int, "warmup": int, "repeats": int,
    "timing_rounds": int, "timing_idle_ms": float, "cuda_graph": bool, "tolerance": float, "fold_batch_norm": bool,
    "layer_choice": str,
}  # fmt: skip
EXPORT_MINIMUMS = {"batch_size": 1, "warmup": 0, "repeats": 1, "timing_rounds": 1, "timing_idle_ms": 0}


def check_train_config(cfg: DictConfig) -> None:
    """train.py's top-level keys and every object it builds; schedule, pattern and scope check themselves."""
    check_fields(cfg, TRAIN_KEYS, "")
    check_targets(cfg)


def check_export_config(cfg: DictConfig) -> None:
    check_fields(cfg, EXPORT_KEYS, "")
    for key, minimum in EXPORT_MINIMUMS.items():
        if cfg[key] < minimum:
            raise UserError(f"{key} must be at least {minimum}, got {cfg[key]}")
    if not cfg.tolerance > 0:
        raise UserError(f"tolerance must be above 0, got {cfg.tolerance}")
