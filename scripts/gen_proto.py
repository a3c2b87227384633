"""Regenerate runtime/_proto from proto/ and make its imports package-relative.

grpcio-tools writes `from toolruntime.v1 import runtime_pb2`, which only works
with proto/ on sys.path; the stubs live inside the `runtime` package instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "runtime" / "_proto"


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(
        [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={OUT_DIR}",
            f"--pyi_out={OUT_DIR}",
            f"--grpc_python_out={OUT_DIR}",
            *protos,
        ]
    )
    if code != 0:
        return code
    for path in [*OUT_DIR.rglob("*.py"), *OUT_DIR.rglob("*.pyi")]:
        text = path.read_text()
        fixed = re.sub(r"^from toolruntime\.v1 import", "from . import", text, flags=re.M)
        if fixed != text:
            path.write_text(fixed)
    packages = [p for p in OUT_DIR.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    for package in [OUT_DIR, *packages]:
        (package / "__init__.py").touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
