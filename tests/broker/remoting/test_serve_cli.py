"""`rocketstore serve` with its remoting options: broker.conf's listenPort, brokerName and
brokerClusterName, the record's store host = the remoting address, and the option errors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore.broker import BrokerConfig
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.endpoint import bind_listener
from rocketstore.broker.server import advertised_address
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.errors import StoreConfigError

from ..test_serve import ENV, UNLIMITED_DISK, Served
from .client import RawClient
from .test_producer import send


def free_port() -> int:
    sock = bind_listener("127.0.0.1:0")
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_broker_conf_names_the_port_broker_and_cluster(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(UNLIMITED_DISK + f"listenPort={port}\nbrokerName=bx\nbrokerClusterName=CX\n")
    s = Served(
        "serve",
        str(tmp_path / "store"),
        "--create",
        "--config",
        str(conf),
        "--listen",
        "off",
        "--namesrv",
        "127.0.0.1:0",
    )
    try:
        assert s.port == port, s.log()
        assert "broker bx of cluster CX" in s.log()
        with RawClient(port) as c:
            resp = send(c, "Conf", b"x")
            assert resp.code == 0, resp.remark
            # the record names the remoting address as its store host: the offset id leads there
            addr, id_port, _ = decode_offset_msg_id(resp.ext_fields["msgId"])
            assert (addr, id_port) == (bytes([127, 0, 0, 1]), port)
            assert c.call(4242).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        # the kernels load on a thread as it starts (warm.preload): its line comes once it is done
        deadline = time.monotonic() + 60
        while "compiled kernels loaded in" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()
        # the log file in the store: what stderr had, the refusal with its codes among it
        logged = (tmp_path / "store" / "logs" / "rocketstore.log").read_text()
        assert "broker bx of cluster CX" in logged and re.search(
            r"INFO rocketstore.broker: store .* closed", logged
        )
        assert "refused OTHER from 127.0.0.1:" in logged and "request type 4242 not supported" in logged
        assert "REQUEST_CODE_NOT_SUPPORTED (3)" in logged
        assert "compiled kernels loaded in" in logged  # (warm.preload, on a thread at start)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--remoting", "off"], "the name server needs the remoting broker"),
        (["--remoting", "off", "--namesrv", "off", "--listen", "off"], "nothing to serve"),
        (["--remoting", "nohost"], "remoting address 'nohost': expected HOST:PORT"),
    ],
)
def test_option_errors(tmp_path: Path, args: list[str], error: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "serve", str(tmp_path / "s"), "--create", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and error in result.stderr, result.stderr


@pytest.mark.parametrize("port", ["²", "٣", "1" * 5000, "65536", "-1", ""])
def test_an_address_port_is_ascii_digits_in_range(port: str) -> None:
    for setting in ("remoting", "listen", "namesrv"):
        with pytest.raises(StoreConfigError, match=rf"{setting} address .*: expected HOST:PORT"):
            BrokerConfig(**{setting: f"127.0.0.1:{port}"})
    with pytest.raises(StoreConfigError, match=r"namesrvAddr element .*: expected HOST:PORT"):
        BrokerConfig(namesrv_addr=f"127.0.0.1:{port}")


def test_advertised_address() -> None:
    assert advertised_address(BrokerConfig(remoting="127.0.0.1:0"), 5) == "127.0.0.1:5"
    assert advertised_address(BrokerConfig(remoting="0.0.0.0:0"), 5) == "127.0.0.1:5"
    assert advertised_address(BrokerConfig(remoting="0.0.0.0:0", broker_ip="10.1.2.3"), 7) == "10.1.2.3:7"
    assert advertised_address(BrokerConfig(remoting="[::1]:0"), 9) == "[::1]:9"
    assert json.dumps(BrokerConfig.from_mapping({"listenPort": "10999"}).remoting) == '"127.0.0.1:10999"'


def test_a_name_server_alone_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    alone = ("--remoting", "off", "--listen", "off")
    s = Served("serve", str(tmp_path / "ns"), "--namesrv", "127.0.0.1:0", *alone)
    try:
        assert "(no broker)" in s.log()
        with RawClient(s.port) as c:
            info = c.call(RequestCode.GET_BROKER_CLUSTER_INFO)
            assert info.code == ResponseCode.SUCCESS
            assert json.loads(info.body) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()
        deadline = time.monotonic() + 10  # the reader thread takes the last lines
        while "SIGTERM received: stopping" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "SIGTERM received: stopping" in s.log()
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
