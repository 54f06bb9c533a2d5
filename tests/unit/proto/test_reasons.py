"""The plain reason table (`hostcap_proto.reasons`, what the daemon's root side
and fs worker import) covers the proto's ErrorReason (`hostcap_proto.names`'
list) with grpc's status codes."""

from __future__ import annotations

import grpc
from hostcap_proto import names, reasons
from hostcap_proto.v1 import common_pb2


def test_the_reasons_are_the_protos_error_reasons() -> None:
    named = set(common_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
    assert named == set(names.REASONS) == set(reasons.STATUS_CODE_NAME)


def test_the_code_numbers_are_grpcs() -> None:
    assert {code.name: code.value[0] for code in grpc.StatusCode} == reasons.CODES
    assert set(reasons.STATUS_CODE_NAME.values()) <= set(reasons.CODES)
