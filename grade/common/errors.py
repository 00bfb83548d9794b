"""User-facing errors.

Every failure a user can cause (bad question, unknown model, unreadable probe file, ...) is raised as a
:class:`GradeError` whose message is one readable line. The CLI prints it without a traceback and the
app shows it in the page; anything else is a bug.
"""


class GradeError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class UnsupportedArchitectureError(GradeError):
    """The model's architecture is not in :data:`grade.models.architectures.ARCHITECTURES`."""


class InputError(GradeError):
    """The question, context or response cannot be analysed (empty, too long, ...)."""


class ModelLoadError(GradeError):
    """A model name, folder or file could not be turned into a model."""


class ProbeError(GradeError):
    """A probe file is unreadable or does not match the model in use."""


class NumericalError(GradeError):
    """Gradients or activations are not finite (NaN/inf), so no feature can be computed."""
