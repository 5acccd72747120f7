"""The exceptions dsptrain raises, split by who has to act on them.

User errors (bad config, data, shapes, a model a recipe cannot lower) derive from
`UserError`; the command line prints them on one line and exits with status 2.
Device failures raise `BackendError`; the executor retries the op on the next backend.
"""


class DsptrainError(Exception):
    """Base class of every error dsptrain raises on purpose."""


class UserError(DsptrainError):
    """Something the user gave us is wrong; the message says what and where."""


class ConfigError(UserError):
    """A YAML file has a bad key or value. The message names file, key and value."""

    def __init__(self, source, key, message):
        self.source, self.key, self.detail = str(source), key, message
        where = f"{self.source}: {key}" if key else self.source
        super().__init__(f"{where}: {message}")


class DataError(UserError):
    """A data file is missing, corrupt, or of the wrong shape."""


class CheckpointError(DataError):
    """A checkpoint is damaged, foreign or not a checkpoint. Names the file, the part
    (an array, a field) and what is wrong with it."""

    def __init__(self, path, key, message):
        self.path, self.key, self.detail = str(path), key, message
        super().__init__(f"{self.path}: {key}: {message}" if key else f"{self.path}: {message}")


class ShapeError(UserError):
    """Tensor shapes do not fit together (names the layer and the shapes)."""


class LoweringError(UserError):
    """A recipe cannot lower a model (names the layer and the recipe)."""


class BackendError(DsptrainError):
    """A device failed (crashed, hung, returned an error status)."""

    def __init__(self, backend, message):
        self.backend = backend
        super().__init__(f"{backend}: {message}")


class NoSupport(BackendError):
    """The backend cannot run this op with these parameters (not a failure)."""


class DivergedError(DsptrainError):
    """Training diverged (a non-finite loss or weight, integer ranges saturated for too
    long). The message says where and what, and which checkpoint holds the last good
    weights; the command exits with status 3."""
