"""`Untrusted`: the wrapper every tool result comes back in.

A tool result is data an attacker may have written (a file, a command's
output, a web page). The engine may place it only in a user or tool
position of a model request, never in a system prompt and never spliced into
an instruction template. `Untrusted` makes the unsafe path fail loudly: it
cannot be turned into a string implicitly (`str()`, f-strings, `+`,
`%`-formatting all raise), its `repr` hides the value, and the value comes
out only through `unwrap()`, called once at the placement site.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NoReturn, TypeVar, final

T = TypeVar("T")
U = TypeVar("U")


class UntrustedValueError(TypeError):
    """An Untrusted value was used as a string; call `unwrap()` where it is placed."""


@final
class Untrusted(Generic[T]):
    """A value produced by a tool, marked as untrusted data."""

    __slots__ = ("_value",)
    _value: T

    def __init__(self, value: T) -> None:
        object.__setattr__(self, "_value", value)

    def unwrap(self) -> T:
        """The value, for the one site that places it in a user or tool position."""
        return self._value

    def map(self, transform: Callable[[T], U]) -> Untrusted[U]:
        """Transform the value; the result stays untrusted."""
        return Untrusted(transform(self._value))

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("Untrusted is immutable")

    def __repr__(self) -> str:
        value = self._value
        size = f", {len(value)} chars" if isinstance(value, str) else ""
        return f"Untrusted(<{type(value).__name__}{size}>)"

    def _refuse(self, *_: object) -> NoReturn:
        raise UntrustedValueError(
            "an Untrusted tool result cannot be used as text; call unwrap() at the placement site"
        )

    __str__ = _refuse
    __format__ = _refuse
    __add__ = _refuse
    __radd__ = _refuse
    __mod__ = _refuse
    __rmod__ = _refuse
    __iter__ = _refuse
    __reduce__ = _refuse
    __reduce_ex__ = _refuse

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Untrusted) and bool(self._value == other._value)

    def __hash__(self) -> int:
        return hash(("Untrusted", self._value))
