"""Config group choices on the command line, checked before Hydra composes: Hydra's own answer to `model=resnet9000`
is several lines and exit status 1, where every other user mistake gets one `error:` line and status 2."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PLAIN_CHOICES = re.compile(r"[\w./-]+(,[\w./-]+)*")  # `pattern=tw` or a multirun's `pattern=ew,vw,tw`


def unknown_choice(conf_dir: Path, overrides: list[str]) -> str | None:
    """The first `group=option` naming no conf/<group>/<option>.yaml, as a one-line message; None when all exist.

    Only plain values are checked: sweep functions, interpolations and deletions are left to Hydra."""
    for override in overrides:
        key, equals, value = override.lstrip("+").partition("=")
        group = conf_dir / key
        if not equals or not group.is_dir() or not PLAIN_CHOICES.fullmatch(value):
            continue
        for option in value.split(","):
            if option != "null" and not (group / f"{option}.yaml").is_file():
                options = ", ".join(sorted(str(p.relative_to(group).with_suffix("")) for p in group.rglob("*.yaml")))
                return f"Could not find '{key}/{option}': {key} is one of {options}"
    return None


def exit_on_unknown_choice(conf_dir: Path) -> None:
    """Exit with `error: <message>` and status 2 when the command line names a config option that does not exist."""
    message = unknown_choice(conf_dir, sys.argv[1:])
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
