"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``): the message classes (``definition_pb2``,
``service_pb2``) and the service's stub and servicer base (``service_pb2_grpc``).

The modules are generated at build time (``setup.py``: grpcio-tools over the descriptors the
official client publishes), not kept in git: ``pip install -e .`` (or ``make test``) writes them.
They register the client's own proto files, byte for byte, so the broker and the official
client can share a process; the client itself is never imported.
"""

from pathlib import Path as _Path

if not (_Path(__file__).parent / "service_pb2_grpc.py").exists():
    raise ImportError(
        "rocketstore.protocol has not been generated: run `pip install -e .` (or `python setup.py "
        "build_py`) in the source tree, with grpcio-tools and rocketmq-python-client installed"
    )
