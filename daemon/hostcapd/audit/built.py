"""Fields the daemon built itself for a record (`AuditLog.write_built`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Built(dict[str, Any]):
    """An event's fields as the daemon built them, in the form the event's
    model dumps them to. `plain`: the builder checked that each float in
    them is one the canonical form's fast encoder writes as repr() does
    (`hostcap_proto.audit.fast_encodable`: 0, or a magnitude in [1e-4,
    1e16)), the rest being text, ints, bools, lists, and dicts with text
    keys by construction (tests/unit/audit/test_built_records.py checks
    both), so the writer seals them without walking them. Fields that are
    not `Built` (or not plain) are walked."""

    __slots__ = ("plain",)

    def __init__(self, fields: Mapping[str, Any], *, plain: bool) -> None:
        super().__init__(fields)
        self.plain = plain
