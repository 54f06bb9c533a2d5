"""The correlation fields any call may carry (labels, request_id): bounded,
because they go whole into fsynced audit records. One check for the process
and the file services."""

from __future__ import annotations

from collections.abc import Mapping

from hostcapd.errors import Refusal, shorten

MAX_LABELS = 32
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 1024
MAX_REQUEST_ID = 256


def validate_correlation(labels: Mapping[str, str], request_id: str) -> None:
    if len(request_id) > MAX_REQUEST_ID:
        raise Refusal("INVALID_ARGUMENT", f"request_id is longer than {MAX_REQUEST_ID} characters")
    if len(labels) > MAX_LABELS:
        raise Refusal("INVALID_ARGUMENT", f"more than {MAX_LABELS} labels")
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE:
            raise Refusal(
                "INVALID_ARGUMENT",
                f"a label key must be 1-{MAX_LABEL_KEY} and a value at most "
                f"{MAX_LABEL_VALUE} characters",
            )


def bounded_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """At most MAX_LABELS labels, keys and values cut to their bounds (for the
    record of a request refused for these very fields)."""
    return {
        shorten(k, MAX_LABEL_KEY): shorten(v, MAX_LABEL_VALUE)
        for k, v in list(labels.items())[:MAX_LABELS]
    }
