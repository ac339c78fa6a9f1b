"""The broker's settings (``BrokerConfig``): where it listens, what it creates on first use, its
limits, transactions, access control and TLS.

``BrokerConfig.from_file`` reads them from the same file as the store's settings: a RocketMQ
``broker.conf`` (``key=value``) or TOML, under RocketMQ's names where RocketMQ has one
(``autoCreateTopicEnable``, ``transactionTimeOut`` ...) and rocketstore's own otherwise. Keys
that belong to the store (``StoreConfig``) are left to it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocketstore.broker.request_log import DEFAULT_SLOW_REQUEST_MS
from rocketstore.config import StoreConfig, decimal_int, parse_settings_text, read_settings_file
from rocketstore.errors import StoreConfigError

__all__ = ["BrokerConfig", "load_settings"]

_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)  # an address's port: ASCII digits (then 0..65535)

MIB = 1024 * 1024


@dataclass(frozen=True)
class BrokerConfig:
    """Everything ``rocketstore serve`` decides apart from the store itself. Times in ms."""

    # gRPC (RocketMQ 5 clients); None: not served
    listen: str | None = "127.0.0.1:8081"
    # RocketMQ's remoting protocol (4.x clients, mqadmin): the broker's HOST:PORT and the name
    # server's; None: not served (the library's default; `rocketstore serve` serves both)
    remoting: str | None = None
    namesrv: str | None = None
    # the host routes and message ids give for the remoting address (RocketMQ's brokerIP1);
    # default: the remoting host, or 127.0.0.1 when it listens on every interface
    broker_ip: str | None = None
    cluster_name: str = "DefaultCluster"
    # the host of the haServerAddr it registers (RocketMQ's brokerIP2); default: broker_ip's
    broker_ip2: str | None = None
    # name servers to register with (RocketMQ's namesrvAddr, ";"-separated); None: none
    namesrv_addr: str | None = None
    # 0: master; >= 1: a slave of the master of the same broker_name (RocketMQ's brokerId)
    broker_id: int = 0
    # registrations (RocketMQ's defaults): period (clamped to 10-60 s), timeout, whether every
    # period registers (false: only when QUERY_DATA_VERSION says the name server's copy changed),
    # and the zlib body
    register_period_ms: int = 30_000
    register_timeout_ms: int = 6_000
    force_register: bool = True
    compressed_register: bool = False
    # the host:port clients are told to dial (routes); default: the listen address, or the
    # address the client used when the broker listens on every interface
    advertise: str | None = None
    broker_name: str = "rocketstore"
    # what the broker allows on all its topics (RocketMQ's brokerPermission: 6 read and write,
    # 4 read only, 2 write only): other than 6, every topic registers with it, so clients stop
    # sending to (4) or reading from (2) this broker; pulls are refused without read, sends to
    # an order topic without write
    broker_permission: int = 6
    auto_create_topic: bool = True
    auto_create_group: bool = True
    # limits (issue item 6)
    max_body_size: int = 4 * MIB
    max_messages_per_send: int = 1024
    max_concurrent_streams: int = 1024
    # remoting: frame size, connections, requests in progress per connection (parked pulls
    # included), bytes of answers queued per connection, server requests awaiting an answer per
    # connection, idle close (0: never)
    max_frame_size: int = 16 * MIB
    max_connections: int = 1024
    max_requests_per_connection: int = 1024
    max_request_bytes_per_connection: int = 64 * MIB
    max_answer_bytes_per_connection: int = 16 * MIB
    max_server_requests_per_connection: int = 256
    idle_timeout_ms: int = 120_000
    max_receive_batch: int = 32
    long_polling_min_ms: int = 5_000
    long_polling_max_ms: int = 20_000
    invisible_min_ms: int = 10_000
    invisible_max_ms: int = 12 * 3600 * 1000
    # what a receive asking for auto-renewal without a duration gets (PushConsumers send none),
    # RocketMQ's proxy default; this broker does not renew it: processing longer than this redelivers
    auto_renew_invisible_ms: int = 60_000
    max_delivery_ahead_ms: int = 24 * 3600 * 1000
    max_delivery_attempts: int = 17
    # transactions (RocketMQ 5's defaults)
    transaction_timeout_ms: int = 6_000
    transaction_check_interval_ms: int = 30_000
    transaction_check_max: int = 15
    # access control and TLS
    acl_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    # the broker's state file for `rocketstore status` (rewritten when clients come and go)
    state_interval_ms: int = 2_000
    # `rocketstore serve`'s log file (rotated at 16 MiB, 4 old files kept); None: the store's
    # logs/rocketstore.log
    log_file: str | None = None
    # a request answered later than this is logged, with its code (0: none are); a pull's or
    # receive's long-poll wait is not counted
    slow_request_ms: int = DEFAULT_SLOW_REQUEST_MS
    # the settings file these came from (`serve --config`): where mqadmin updateBrokerConfig's
    # changes are written, as RocketMQ's broker rewrites its broker.conf; None: not kept
    config_file: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (type(value) is not int or value < 0):
                raise StoreConfigError(f"broker setting {f.name} must be a non-negative int, not {value!r}")
        if self.long_polling_min_ms > self.long_polling_max_ms:
            raise StoreConfigError("long_polling_min_ms must not exceed long_polling_max_ms")
        if self.invisible_min_ms > self.invisible_max_ms:
            raise StoreConfigError("invisible_min_ms must not exceed invisible_max_ms")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise StoreConfigError("TLS needs both a certificate (tls_cert) and its key (tls_key)")
        for name in ("listen", "remoting", "namesrv"):
            address = getattr(self, name)
            if address is None:
                continue
            host, sep, port = address.rpartition(":")
            if not sep or not host or not _PORT.fullmatch(port) or not 0 <= int(port) <= 65535:
                raise StoreConfigError(f"{name} address {address!r}: expected HOST:PORT")
        if self.namesrv is not None and self.remoting is None:
            raise StoreConfigError(
                "the name server needs the remoting broker: its routes point at the remoting address"
            )
        for address in self.name_servers():
            host, sep, port = address.rpartition(":")
            if not sep or not host or not _PORT.fullmatch(port) or not 0 < int(port) <= 65535:
                raise StoreConfigError(f"namesrvAddr element {address!r}: expected HOST:PORT")
        if self.broker_permission > 7:
            raise StoreConfigError(
                f"brokerPermission {self.broker_permission}: expected 6 (read and write), 4 (read) "
                "or 2 (write)"
            )
        if self.max_frame_size < 1024:
            raise StoreConfigError(f"max_frame_size {self.max_frame_size} is below 1024 bytes")

    def name_servers(self) -> list[str]:
        """The addresses of ``namesrv_addr``."""
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]

    def replace(self, **changes: object) -> BrokerConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> BrokerConfig:
        """The broker's keys of ``values`` (RocketMQ or rocketstore names); other keys are ignored
        (they are the store's, checked by ``StoreConfig``)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, object] = {}
        for key, raw in values.items():
            if key == "listenPort":  # RocketMQ's broker port: the remoting listener's
                port = _coerce(key, "int", raw)
                kwargs.setdefault("remoting", f"127.0.0.1:{port}")
                continue
            name = _ROCKETMQ_NAMES.get(key, key)
            f = fields.get(name)
            if f is None:
                continue
            kwargs[name] = _coerce(name, f.type, raw)
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_file(cls, path: str | Path) -> BrokerConfig:
        """The broker's keys of a ``.toml`` or ``.properties`` file (see the module docstring)."""
        return load_settings(path)[1]


def load_settings(path: str | Path, text: str | None = None) -> tuple[StoreConfig, BrokerConfig]:
    """The store's and the broker's settings from one file (``rocketstore serve --config``): a
    ``.toml`` file (the broker's keys at the top or under ``[broker]``) or a ``.properties`` /
    ``broker.conf`` file. A key neither of them knows is refused (by ``StoreConfig``). ``text``:
    read it as the file's content instead (a rewrite of the file, checked before it is written)."""
    values = read_settings_file(path) if text is None else parse_settings_text(text, path)
    broker_table = values.pop("broker", {}) if Path(path).suffix == ".toml" else {}
    if not isinstance(broker_table, dict):
        raise StoreConfigError(f"{path}: [broker] must be a table")
    own = {f.name for f in dataclasses.fields(BrokerConfig)}
    broker = BrokerConfig.from_mapping({**values, **broker_table})
    store = StoreConfig.from_mapping({k: v for k, v in values.items() if k not in own})
    return store, broker


_ROCKETMQ_NAMES = {
    "autoCreateTopicEnable": "auto_create_topic",
    "autoCreateSubscriptionGroup": "auto_create_group",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionCheckMax": "transaction_check_max",
    "brokerName": "broker_name",
    "brokerClusterName": "cluster_name",
    "brokerIP1": "broker_ip",
    "brokerIP2": "broker_ip2",
    "namesrvAddr": "namesrv_addr",
    "brokerId": "broker_id",
    "brokerPermission": "broker_permission",
    "registerNameServerPeriod": "register_period_ms",
    "registerBrokerTimeoutMills": "register_timeout_ms",
    "forceRegister": "force_register",
    "compressedRegister": "compressed_register",
    "maxMessageSize": "max_body_size",
}


def _coerce(name: str, kind: object, raw: object) -> object:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise StoreConfigError(f"broker setting {name}: expected true or false, not {raw!r}")
        return text == "true"
    if kind in ("int", "int | None"):
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        number = decimal_int(str(raw))
        if number is None:
            raise StoreConfigError(f"broker setting {name}: expected an int, not {raw!r}")
        return number
    return None if raw is None else str(raw)
