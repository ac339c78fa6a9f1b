"""Topics (``config/topics.json``): queue counts and permissions, and which queue a put without
one goes to.

A topic is known once it is created, found in ``topics.json``, or has consume queues on disk
(stores written by a broker that kept its topic table elsewhere). A put to an unknown topic
creates it with ``default_topic_queue_nums`` queues, as RocketMQ's autoCreateTopicEnable does.
Every change is written at once, atomically (new file, fsync, rename): the table is small and
changes rarely.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock
from rocketstore.codec.config_json import PERM_READ, PERM_WRITE, TopicConfig, decode_topics, encode_topics
from rocketstore.codec.java_hash import java_hash
from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write, read_store_text

__all__ = ["PROPERTY_SHARDING_KEY", "TopicConfig", "TopicTable", "sharding_queue"]

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # RocketMQ 5's name for an ordering/sharding key
_MAX_QUEUES = 1024


def sharding_queue(sharding_key: str, queues: int) -> int:
    """The queue of a message with a sharding key (a message group) among ``queues``: the same
    key, the same queue, as RocketMQ 5 picks it."""
    return abs(java_hash(sharding_key)) % queues


class TopicTable:
    def __init__(
        self,
        path: Path,
        clock: Clock,
        default_queues: int,
        *,
        readonly: bool = False,
        mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        self.path = path
        self._mode = mode
        self._clock = clock
        self._default_queues = default_queues
        self._readonly = readonly
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._counter = 0
        self._round_robin: dict[str, itertools.count[int]] = {}

    def load(self, queues_on_disk: Mapping[str, Iterable[int]]) -> None:
        text = read_store_text(self.path)
        if text is not None:
            self._topics, self._counter = decode_topics(text, str(self.path))
        for topic, qids in queues_on_disk.items():
            if topic not in self._topics:
                n = max(qids, default=-1) + 1
                self._topics[topic] = TopicConfig(topic, n, n)

    def __contains__(self, topic: str) -> bool:
        return topic in self._topics

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def create(
        self, topic: str, queues: int, *, perm: int = PERM_READ | PERM_WRITE, order: bool = False
    ) -> TopicConfig:
        """Create ``topic`` or change its queue count and permissions; written at once."""
        self._check(topic, queues, perm)
        self._check_writable()
        config = TopicConfig(topic, queues, queues, perm, order)
        with self._lock:
            before = self._topics.get(topic)
            if before != config:
                self._topics[topic] = config
                try:
                    self._persist()
                except BaseException:  # not written: not made (a put naming the topic may retry)
                    if before is None:
                        del self._topics[topic]
                    else:
                        self._topics[topic] = before
                    raise
        return config

    def create_many(self, configs: Iterable[TopicConfig]) -> dict[str, StoreConfigError]:
        """``create`` for each of ``configs`` (its ``read_queues`` queues), the table written
        once for all; the ones refused, by name (the others are made)."""
        self._check_writable()
        refused: dict[str, StoreConfigError] = {}
        wanted: list[TopicConfig] = []
        for c in configs:
            try:
                self._check(c.topic, c.read_queues, c.perm)
            except StoreConfigError as exc:
                refused[c.topic] = exc
                continue
            wanted.append(TopicConfig(c.topic, c.read_queues, c.read_queues, c.perm, c.order))
        with self._lock:
            changes = {c.topic: c for c in wanted if self._topics.get(c.topic) != c}
            if changes:
                before = dict(self._topics)
                self._topics.update(changes)
                try:
                    self._persist()
                except BaseException:  # not written: none made
                    self._topics = before
                    raise
        return refused

    @property
    def version(self) -> int:
        """A counter that grows at every change of the table (topics.json's dataVersion)."""
        return self._counter

    def delete(self, topic: str) -> bool:
        """Forget ``topic`` (mqadmin deleteTopic's deleteTopicConfig); written at once. False if
        it was not known."""
        self._check_writable()
        with self._lock:
            before = self._topics.pop(topic, None)
            if before is None:
                return False
            try:
                self._persist()
            except BaseException:
                self._topics[topic] = before
                raise
            self._round_robin.pop(topic, None)
        return True

    def select_queue(self, topic: str, sharding_key: str | None) -> int:
        """The queue for a put that named none: by the sharding key's hash when there is one
        (the same key, the same queue), else round robin over the topic's write queues."""
        config = self._topics.get(topic)
        if config is None:
            n = self._default_queues
            config = TopicConfig(topic, n, n) if self._readonly else self.create(topic, n)
        n = max(1, config.write_queues)
        if sharding_key:
            return sharding_queue(sharding_key, n)
        counter = self._round_robin.get(topic)
        if counter is None:
            counter = self._round_robin.setdefault(topic, itertools.count())
        return next(counter) % n

    def select_queues(self, topic: str, n: int) -> npt.NDArray[np.int64]:
        """Queues for ``n`` puts that named none: the next ``n`` round-robin picks."""
        config = self._topics.get(topic)
        if config is None:
            m = self._default_queues
            config = TopicConfig(topic, m, m) if self._readonly else self.create(topic, m)
        with self._lock:
            counter = self._round_robin.get(topic)
            first = next(counter) if counter is not None else 0
            self._round_robin[topic] = itertools.count(first + n)
        return (np.arange(first, first + n, dtype=np.int64)) % max(1, config.write_queues)

    def writable(self, topic: str) -> bool:
        config = self._topics.get(topic)
        return config is None or bool(config.perm & PERM_WRITE)

    def perm(self, topic: str) -> int | None:
        config = self._topics.get(topic)
        return config.perm if config is not None else None

    @staticmethod
    def _check(topic: str, queues: int, perm: int) -> None:
        if not 1 <= queues <= _MAX_QUEUES:
            raise StoreConfigError(f"topic {topic!r}: queues must be 1..{_MAX_QUEUES}, not {queues}")
        if perm & ~(PERM_READ | PERM_WRITE | 0x1):
            raise StoreConfigError(f"topic {topic!r}: perm {perm} has unknown bits")

    def _check_writable(self) -> None:
        if self._readonly:
            raise StoreConfigError("the store is open read-only: topics cannot be changed")

    def _persist(self) -> None:
        """Write the table (StoreIOError, StoreAccessError when the system refuses)."""
        self._counter += 1
        atomic_write(self.path, encode_topics(self._topics, self._counter, self._clock.now_ms()), self._mode)
