"""The one exception family of `analysis`: every message is a plain sentence for a person.

The CLI prints `str(error)` on one line and exits non-zero; the app shows it as is. Anything that
is not an `AnalysisError` is a bug and keeps its traceback.
"""
from __future__ import annotations


class AnalysisError(Exception):
    """Base class: the input or the machine cannot do what was asked; the message says what to do."""


class ConfigError(AnalysisError, ValueError):
    """A run setting out of range (budget, band, selector, backend, segment length)."""


class DocumentTooLongError(AnalysisError):
    """The document has more tokens than the model (or the configured limit) accepts."""


class OutOfMemoryError(AnalysisError):
    """The accelerator ran out of memory during a run."""


class NonFiniteError(AnalysisError):
    """A run produced NaN or infinity in the model's hidden states or a core output."""
