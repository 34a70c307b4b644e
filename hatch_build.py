"""Build hook: generates the Python modules of rocketflow's gRPC protocol from its ``.proto`` files.

The ``.proto`` files live in ``src/rocketflow/grpc_protocol``; ``grpc_tools.protoc`` (from ``grpcio-tools``,
a build requirement) writes ``*_pb2.py`` and ``*_pb2_grpc.py`` beside them, and mypy-protobuf's plugins
their ``.pyi`` stubs (so ``mypy --strict`` checks code that uses them). The generated files are
git-ignored and made on every build, editable installs included.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

PROTO_DIR = Path("src") / "rocketflow" / "grpc_protocol"


def _plugin(name: str) -> str:
    """The path of a protoc plugin script installed with the build environment's Python."""
    candidates = [Path(sysconfig.get_path("scripts")) / name, Path(sys.executable).with_name(name)]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found (is mypy-protobuf installed in the build environment?)")
    return found


def generate(root: Path) -> list[Path]:
    """Run protoc over the ``.proto`` files under ``root``; returns the files it wrote."""
    src = root / "src"
    protos = sorted((root / PROTO_DIR).glob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files in {root / PROTO_DIR}")
    import grpc_tools  # a build requirement

    include = Path(grpc_tools.__file__).parent / "_proto"
    argv = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{include}",
        f"--python_out={src}", f"--grpc_python_out={src}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}", f"--mypy_out={src}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}", f"--mypy_grpc_out={src}",
        *(str(path) for path in protos),
    ]
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"protoc failed ({completed.returncode}): {completed.stderr.strip()}")
    return sorted(path for path in (root / PROTO_DIR).iterdir() if "_pb2" in path.name)


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script in a venv without hatchling
    pass
else:

    class ProtoBuildHook(BuildHookInterface):  # type: ignore[type-arg]
        PLUGIN_NAME = "custom"

        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            root = Path(self.root)
            generated = generate(root)
            # git-ignored files are left out of builds unless named as artifacts
            build_data.setdefault("artifacts", []).extend(str(path.relative_to(root)) for path in generated)


if __name__ == "__main__":  # `python hatch_build.py`: regenerate in a checkout without reinstalling
    for path in generate(Path(__file__).resolve().parent):
        print(path)
