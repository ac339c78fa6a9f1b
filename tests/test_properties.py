"""Java .properties text (properties.py), read as java.util.Properties reads RocketMQ's
broker.conf, by the store's and the broker's settings loaders and UPDATE_BROKER_CONFIG alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore import properties
from rocketstore.broker import BrokerConfig
from rocketstore.broker.config import load_settings
from rocketstore.broker.remoting.broker_settings import parse_update
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreConfigError


def test_separators_comments_continuations_and_escapes_are_javas() -> None:
    text = (
        "# a comment\n"
        "  ! another\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d\t=  4 4 \n"
        "e\n"
        "f=one \\\n"
        "    two\n"
        "g=C:\\\\data\\u0041\\:\\x\n"
        "h\\ i=5\r\n"
        "j=6\r"
        "k=7\\"
    )
    assert properties.parse(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4 4 ",
        "e": "",
        "f": "one two",
        "g": "C:\\dataA:x",
        "h i": "5",
        "j": "6",
        "k": "7",
    }
    with pytest.raises(StoreConfigError, match=r"conf:2: malformed \\uxxxx escape \\u12"):
        properties.parse("a=1\nb=\\u12", "conf")


@given(st.text(), st.text())
def test_a_written_line_reads_back_as_written(key: str, value: str) -> None:
    assert properties.parse(properties.text_of({key: value})) == {key: value}


def test_broker_conf_with_colons_and_blanks_loads_as_rocketmq_loads_it(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName : broker-b\nflushDiskType SYNC_FLUSH\ntransactionTimeOut=\\\n  7000\n")
    assert StoreConfig.from_file(conf).flush_disk_type == "SYNC_FLUSH"
    _, broker = load_settings(conf)
    assert (broker.broker_name, broker.transaction_timeout_ms) == ("broker-b", 7000)
    pairs, _ = parse_update(b"transactionTimeOut \\\n 8000\nautoCreateTopicEnable:false", BrokerConfig())
    assert pairs == {"transactionTimeOut": "8000", "autoCreateTopicEnable": "false"}
