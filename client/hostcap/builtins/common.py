"""Argument and result bases the built-in tools share."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def printable(value: str) -> str:
    if any(ord(ch) < 32 and ch not in "\t\n" for ch in value):
        raise ValueError("must not contain control characters")
    return value


PathArg = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(no_nul)]
Arg = Annotated[str, Field(max_length=128 * 1024), AfterValidator(no_nul)]


class FrozenArgs(BaseModel):
    # Frozen: the validated arguments are the one value the guardrails,
    # the approval card and the dispatch all see.
    model_config = ConfigDict(frozen=True, extra="forbid")


class FrozenResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    #: The model-facing text may carry content from outside (a file, a
    #: command's output, a response): it is fenced as untrusted data. A
    #: result made only of the host's own facts and the call's own
    #: arguments (a write's acknowledgement) says False and gets a short tag.
    untrusted_content: ClassVar[bool] = True
