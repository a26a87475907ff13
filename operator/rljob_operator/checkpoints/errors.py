"""The one error type the checkpoint tools raise for bad input (exit code 2 in the CLI)."""

from __future__ import annotations


class CheckpointInputError(ValueError):
    """The caller asked for something that cannot be answered: a missing directory, an
    unknown layout, a path that is not a directory. Distinct from a checkpoint that is
    merely incomplete, which is an answer, not an error."""
