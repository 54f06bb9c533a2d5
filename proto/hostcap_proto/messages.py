"""How large a gRPC message of hostcap can be, from the ceilings that bound it.

A ``RunResult`` carries both kept streams (each up to ``output_bytes``, plus
the marker line where the middle was dropped) and a small envelope (the
``Started`` and ``Exited`` reports); a ``ReadFileResponse`` carries up to
``max_read_bytes``. The daemon sizes a tenant's send limit with
`reply_bytes`, the client its receive limit with `MAX_REPLY_BYTES`, and the
daemon's config refuses (``LIMIT_INVALID``) a tenant whose ceilings would
make a reply larger than that (`check_receivable`): every result the daemon
can produce is one its own client can receive.
"""

from __future__ import annotations

from hostcap_proto.limits import MiB

#: Room for everything of a reply but its payload: the Started and Exited
#: reports (limits, protections, env names, cwd, short messages) and the
#: marker lines. Measured at well under 64 KiB; 16 MiB is the safety margin.
ENVELOPE_BYTES = 16 * MiB
#: The largest output_bytes ceiling a tenant may have (per stream).
MAX_OUTPUT_BYTES_CEILING = 512 * MiB
#: The largest reply of any tenant, and the client's receive limit: both
#: streams at the largest output ceiling, plus the envelope (below gRPC's own
#: ceiling of 2 GiB - 1).
MAX_REPLY_BYTES = 2 * MAX_OUTPUT_BYTES_CEILING + ENVELOPE_BYTES
#: The largest max_read_bytes a tenant may have (one ReadFile's content).
MAX_READ_BYTES_CEILING = MAX_REPLY_BYTES - ENVELOPE_BYTES
#: The largest request the daemon takes (a spawn with stdin, a file write).
MAX_REQUEST_BYTES = 80 * MiB


def reply_bytes(output_bytes: int, max_read_bytes: int) -> int:
    """The largest reply a tenant with these ceilings can be sent."""
    return max(2 * output_bytes, max_read_bytes, MAX_REQUEST_BYTES) + ENVELOPE_BYTES


def check_receivable(output_bytes: int, max_read_bytes: int) -> None:
    """Raise ValueError (naming LIMIT_INVALID) when a reply within these
    ceilings could exceed what the client receives."""
    if output_bytes > MAX_OUTPUT_BYTES_CEILING:
        raise ValueError(
            f"LIMIT_INVALID: ceiling output_bytes {output_bytes} is above "
            f"{MAX_OUTPUT_BYTES_CEILING}: a Run result with both streams kept would be "
            f"larger than the client's maximum message ({MAX_REPLY_BYTES} bytes)"
        )
    if max_read_bytes > MAX_READ_BYTES_CEILING:
        raise ValueError(
            f"LIMIT_INVALID: fs.max_read_bytes {max_read_bytes} is above "
            f"{MAX_READ_BYTES_CEILING}: a ReadFile reply would be larger than the "
            f"client's maximum message ({MAX_REPLY_BYTES} bytes)"
        )
