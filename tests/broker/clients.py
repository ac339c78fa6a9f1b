"""The official Python client (rocketmq-python-client) as the tests use it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def configuration(port: int, ak: str = "", sk: str = "") -> Any:
    return ClientConfiguration(f"127.0.0.1:{port}", Credentials(ak, sk))


@contextlib.contextmanager
def producer(
    port: int, topics: tuple[str, ...], checker: Any = None, ak: str = "", sk: str = ""
) -> Iterator[Any]:
    p = Producer(configuration(port, ak, sk), topics, checker)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextlib.contextmanager
def simple_consumer(port: int, group: str, topic: str, tags: str = "*", await_s: int = 5) -> Iterator[Any]:
    c = SimpleConsumer(configuration(port), group, {topic: FilterExpression(tags)}, await_s)
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def message(
    topic: str,
    body: bytes,
    *,
    tag: str | None = None,
    keys: tuple[str, ...] = (),
    group: str | None = None,
    deliver_at_s: int | None = None,
    properties: dict[str, str] | None = None,
) -> Any:
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    for key in keys:
        m.keys = key  # the setter adds one key
    if group:
        m.message_group = group
    if deliver_at_s:
        m.delivery_timestamp = deliver_at_s
    for k, v in (properties or {}).items():
        m.add_property(k, v)
    return m
