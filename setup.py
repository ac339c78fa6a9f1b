"""Build step: generate the broker's gRPC protocol modules (``rocketstore.protocol``).

The broker speaks RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``). Its message and service
classes are generated here, at build time, with grpcio-tools, from the protocol's file
descriptors as the official Python client (rocketmq-python-client, a build requirement, pinned)
publishes them. The descriptors are read from the client's generated modules as data, never
imported (importing the client sets up a log under $HOME), and handed to protoc as a descriptor
set. So the broker's modules register exactly the client's ``definition.proto``,
``service.proto`` and ``admin.proto`` (the same names, byte-identical content): the tests run
broker and client in one process, and protobuf's default pool takes a file twice only when both
are identical.

The modules are written into ``src/rocketstore/protocol`` (ignored by git) before the usual
build, so that editable installs see them too. ``python setup.py build_py`` regenerates them.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

_PROTOCOL_DIR = Path(__file__).resolve().parent / "src" / "rocketstore" / "protocol"
# the client's generated modules, in dependency order, and the proto file each registers
_FILES = (("definition_pb2.py", "definition.proto"), ("service_pb2.py", "service.proto"))


def _client_protocol_dir() -> Path:
    spec = importlib.util.find_spec("rocketmq")  # a top-level find: nothing of it is imported
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "rocketmq-python-client is not installed: the build reads the RocketMQ 5 protocol's "
            "descriptors from it (pip install 'rocketmq-python-client==5.1.2')"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "grpc_protocol"


def _serialized_descriptor(module: Path) -> bytes:
    """The FileDescriptorProto bytes a generated module passes to ``AddSerializedFile``."""
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
        ):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise RuntimeError(f"{module}: no AddSerializedFile(b'...') call: not a protoc-generated module")


def _descriptor_set(files: list[bytes]) -> bytes:
    # FileDescriptorSet { repeated FileDescriptorProto file = 1; }, written by hand so that the
    # build needs no protobuf import of its own: tag 0x0A, varint length, the bytes
    out = bytearray()
    for data in files:
        out.append(0x0A)
        n = len(data)
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        out += data
    return bytes(out)


def generate_protocol(target: Path = _PROTOCOL_DIR) -> None:
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    source = _client_protocol_dir()
    descriptors = [_serialized_descriptor(source / module) for module, _ in _FILES]
    with tempfile.TemporaryDirectory() as tmp:
        descriptor_set = Path(tmp) / "rocketmq_v2.desc"
        descriptor_set.write_bytes(_descriptor_set(descriptors))
        args = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={descriptor_set}",
            f"--proto_path={well_known}",
            f"--python_out={target}",
            f"--grpc_python_out={target}",
            *(name for _, name in _FILES),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
    # protoc writes the flat imports of flat file names (``import definition_pb2``): make them
    # imports of this package
    for path in target.glob("*_pb2*.py"):
        text = path.read_text(encoding="utf-8")
        text = re.sub(
            r"^import (\w+_pb2) as ", r"from rocketstore.protocol import \1 as ", text, flags=re.MULTILINE
        )
        path.write_text(text, encoding="utf-8")


class BuildPyWithProtocol(build_py):  # type: ignore[misc]
    def run(self) -> None:
        generate_protocol()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProtocol})
