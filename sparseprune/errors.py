"""One exception type for mistakes a user can fix, so entry points print one clear line instead of a traceback."""


class UserError(Exception):
    """Bad input (config value, shape, file): the message alone tells the user what to change."""
