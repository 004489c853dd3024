"""Generate the Python protobuf/gRPC modules (and typing stubs) from protos/.

Usage: python scripts/gen_protos.py [OUT_DIR]   (default: agent/_proto)

The output is committed; tests/unit/test_proto_sync.py regenerates into a temp
directory and fails if anything differs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
BIN = Path(sys.executable).parent  # mypy-protobuf installs its protoc plugins here
FILES = (
    "deviceplugin/v1beta1/api.proto",
    "podresources/v1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "pluginregistration/v1/api.proto",
    "drahealth/v1alpha1/api.proto",
)


def generate(out_dir: Path) -> None:
    """Write generated modules under out_dir, mirroring protos/ with __init__.py files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = out_dir / ".stage"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        # The virtual import path makes generated modules import each other as
        # agent._proto.<...>, so they work as a package without sys.path tricks.
        for rel in FILES:
            args = [
                "protoc",
                f"-Iagent/_proto={PROTOS}",
                f"--python_out={stage}",
                f"--grpc_python_out={stage}",
                f"--mypy_out={stage}",
                f"--mypy_grpc_out={stage}",
                f"--plugin=protoc-gen-mypy={BIN / 'protoc-gen-mypy'}",
                f"--plugin=protoc-gen-mypy_grpc={BIN / 'protoc-gen-mypy_grpc'}",
                f"agent/_proto/{rel}",
            ]
            if protoc.main(args) != 0:
                raise SystemExit(f"protoc failed for {rel}")
        generated = stage / "agent" / "_proto"
        for src in sorted(generated.rglob("*")):
            if src.is_file():
                dst = out_dir / src.relative_to(generated)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
        for pkg in [out_dir, *sorted(p for p in out_dir.rglob("*") if p.is_dir())]:
            if pkg.name != ".stage" and ".stage" not in pkg.parts:
                init = pkg / "__init__.py"
                if not init.exists():
                    init.write_text('"""Generated from protos/ by scripts/gen_protos.py; do not edit."""\n')
    finally:
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "agent" / "_proto")
