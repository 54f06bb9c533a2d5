"""What a confined helper process (the fs worker, a front-end) reports of
each protection, and the refusal to serve without one (a light module:
both import it before anything else of the daemon)."""

from __future__ import annotations

from dataclasses import dataclass

from hostcap_proto.names import HelperProtectionName


@dataclass(frozen=True)
class Applied:
    """One protection of the process and whether it is in force."""

    name: HelperProtectionName
    applied: bool
    reason: str
    required: bool


class Unavailable(Exception):
    """A required protection cannot be applied: the process does not serve."""
