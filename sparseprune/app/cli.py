"""Entry-point plumbing shared by train.py and export.py: one clear line for user mistakes."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from hydra.errors import InstantiationException
from omegaconf.errors import MissingMandatoryValue

from sparseprune.errors import UserError

log = logging.getLogger("sparseprune")
Result = TypeVar("Result")


def user_error_in(error: BaseException) -> UserError | None:
    """Hydra wraps constructor errors; find a UserError anywhere in the cause chain."""
    while error is not None:
        if isinstance(error, UserError):
            return error
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return None


def exit_with_error(message: str) -> NoReturn:
    """The one line a user mistake gets, and exit status 2 (a usage error, as argparse uses)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def exit_on_user_error(main: Callable[..., Result]) -> Callable[..., Result]:
    """Print `error: <message>` and exit with status 2 for UserErrors; real bugs keep their traceback."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Result:
        try:
            return main(*args, **kwargs)
        except MissingMandatoryValue as error:
            exit_with_error(f"{error.full_key} is required: add {error.full_key}=... to the command line")
        except (UserError, InstantiationException) as error:
            user_error = user_error_in(error)
            if user_error is None:
                raise
            exit_with_error(str(user_error))

    return wrapper
