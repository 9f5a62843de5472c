"""Errors a user can cause. The entry points turn them into one clear message and exit code 2."""


class UserError(Exception):
    """A problem with the user's input (config, data, checkpoint); the message names the thing and the fix."""


class ConfigError(UserError):
    """A config key is unknown, mistyped or inconsistent."""


class DataError(UserError):
    """A dataset is missing, corrupt, empty or fails its checksum."""


class CheckpointError(UserError):
    """A checkpoint does not fit the model, data or tokenizer it is used with."""
