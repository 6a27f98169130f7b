"""Regenerate the committed ``streamList`` stubs from the vendored proto: ``make proto``.

A development tool (it needs ``grpcio-tools``, a dev dependency), kept next to what it generates
so the command and the freshness test (tests/test_youtube_proto.py) compile the proto the same
way.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "stream_list.proto"
OUTPUTS = ("stream_list_pb2.py", "stream_list_pb2.pyi")


def generate(out: Path) -> list[Path]:
    """Compile the proto into ``out``; the paths of the generated files."""
    from importlib.resources import files

    from grpc_tools import protoc

    well_known = files("grpc_tools") / "_proto"  # google/protobuf/duration.proto
    code = protoc.main(
        [
            "protoc",
            f"-I{HERE}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            str(PROTO),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed ({code}) on {PROTO}")
    return [out / name for name in OUTPUTS]


if __name__ == "__main__":
    for path in generate(HERE):
        print(f"wrote {path}")
    sys.exit(0)
