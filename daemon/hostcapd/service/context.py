"""The servicer context type (grpc's stubs do not parameterise it usefully)."""

from typing import Any

import grpc

Context = grpc.aio.ServicerContext[Any, Any]
