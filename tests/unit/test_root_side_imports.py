"""The daemon's root side never loads gRPC or the wire's protobuf: only the
front-end (`hostcapd.frontend`, the unprivileged process) converts between
the wire and the channel's typed messages (decision 0022)."""

from __future__ import annotations

import json
import subprocess
import sys

PROGRAM = """
import importlib, json, pkgutil, sys
import hostcapd
names = sorted(
    m.name
    for m in pkgutil.walk_packages(hostcapd.__path__, "hostcapd.")
    if not m.name.startswith("hostcapd.frontend") and not m.name.endswith("__main__")
)
for name in names:
    importlib.import_module(name)
loaded = [
    n for n in sys.modules
    if n == "grpc" or n.startswith("grpc.") or n.startswith("grpc_")
    or (n.startswith("hostcap_proto.v1.") and n.endswith("_pb2"))
]
print(json.dumps({"imported": names, "loaded": loaded}))
"""


def test_no_root_side_module_imports_grpc_or_a_pb2_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(done.stdout)
    assert (
        "hostcapd.daemon" in found["imported"] and "hostcapd.service.servers" in found["imported"]
    )
    assert found["loaded"] == []


def test_the_front_end_is_where_they_are_loaded() -> None:
    # The control: the same check sees them once the front-end is imported.
    program = PROGRAM.replace('not m.name.startswith("hostcapd.frontend") and ', "")
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(done.stdout)["loaded"]
    assert "grpc" in loaded and "hostcap_proto.v1.process_pb2" in loaded
