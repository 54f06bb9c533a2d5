"""Regenerate the committed protobuf/gRPC Python code from the .proto sources.

Usage: python proto/generate.py [OUTPUT_DIR]   (default: proto/, in place)
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent


def sources() -> list[Path]:
    return sorted((PROTO_ROOT / "hostcap_proto" / "v1").glob("*.proto"))


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in sources()),
    ]
    import os

    cwd = os.getcwd()
    os.chdir(PROTO_ROOT)
    try:
        code = protoc.main(args)
    finally:
        os.chdir(cwd)
    if code != 0:
        raise SystemExit(f"protoc failed with status {code}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
