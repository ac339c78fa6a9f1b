"""Prometheus metrics of the broker (issue item 7), served by ``--metrics HOST:PORT``.

Counters are counted by the service as requests are answered; the lag per group and topic and
the store figures are read from the store when Prometheus scrapes (a collector), so they cost
nothing between scrapes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rocketstore.broker.stats_items import BrokerStats
from rocketstore.store import MessageStore

__all__ = ["BrokerMetrics"]


class _StoreCollector(Collector):
    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        store = self._store
        lag = GaugeMetricFamily(
            "rocketstore_consumer_lag_messages",
            "Messages of the topic not yet consumed by the group (by committed offsets)",
            labels=["group", "topic"],
        )
        try:
            for (topic, group), queues in store.consumer_offsets().items():
                behind = sum(max(0, store.max_offset_in_queue(topic, q) - off) for q, off in queues.items())
                lag.add_metric([group, topic], behind)
            info = store.runtime_info()
        except Exception:  # the store closed under the scrape: report nothing rather than fail
            return
        yield lag
        for key in (
            "commitLogMaxOffset",
            "commitLogMinOffset",
            "dispatchBehindBytes",
            "remainHowManyDataToFlush",
            "commitLogDiskRatio",
            "putTps",
        ):
            value = info.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                g = GaugeMetricFamily(f"rocketstore_store_{_snake(key)}", f"runtime_info()['{key}']")
                g.add_metric([], float(value))
                yield g


class _ThreadsCollector(Collector):
    """CPU seconds of the process's live Python threads, by name (read when scraped): where the
    broker's time goes, the event loop's (``MainThread`` under ``rocketstore serve``) and each
    store service's apart. A thread that ended is no longer counted."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        cpu = CounterMetricFamily(
            "rocketstore_thread_cpu_seconds", "CPU seconds of each thread of the process", labels=["thread"]
        )
        by_name: dict[str, float] = {}
        for thread in threading.enumerate():
            if thread.ident is None:
                continue
            try:
                seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except (OSError, AttributeError):  # it ended meanwhile; or no per-thread clocks here
                continue
            by_name[thread.name] = by_name.get(thread.name, 0.0) + seconds
        for name, seconds in sorted(by_name.items()):
            cpu.add_metric([name], seconds)
        yield cpu


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


class BrokerMetrics:
    def __init__(self, store: MessageStore, cluster: str = "DefaultCluster") -> None:
        # RocketMQ's stats items (per topic and group, by minute, hour and day), which mqadmin
        # statsAll reads over remoting; counted beside the Prometheus counters
        self.stats = BrokerStats(cluster)
        self.registry = CollectorRegistry()
        r = self.registry
        self.sends = Counter(
            "rocketstore_broker_sends",
            "Messages sent, by topic, type and answer",
            ["topic", "type", "code"],
            registry=r,
        )
        self.receives = Counter(
            "rocketstore_broker_receives", "Messages handed to consumers", ["group", "topic"], registry=r
        )
        self.acks = Counter(
            "rocketstore_broker_acks", "Acknowledgements, by answer", ["group", "topic", "code"], registry=r
        )
        self.retries = Counter(
            "rocketstore_broker_redeliveries",
            "Messages delivered again (delivery attempt > 1)",
            ["group", "topic"],
            registry=r,
        )
        self.dlq = Counter(
            "rocketstore_broker_dlq", "Messages forwarded to the DLQ", ["group", "topic"], registry=r
        )
        self.transactions = Counter(
            "rocketstore_broker_transactions",
            "Transactions ended, by resolution and source",
            ["resolution", "source"],
            registry=r,
        )
        self.clients = Gauge("rocketstore_broker_clients", "Clients known to the broker", registry=r)
        self.batches = Counter(
            "rocketstore_broker_put_batches", "Store appends (group commits) of sends", registry=r
        )
        self.pull_reads = Counter(
            "rocketstore_broker_pull_reads",
            "Store reads of remoting pulls in bulk (one call a round: pulls per read is their batching)",
            registry=r,
        )
        self.remoting_requests = Counter(
            "rocketstore_broker_remoting_requests",
            "Remoting requests answered (or taken oneway), by listener, request code and response code",
            ["listener", "request", "response"],
            registry=r,
        )
        self.remoting_connections = Gauge(
            "rocketstore_broker_remoting_connections",
            "Open remoting connections, by listener",
            ["listener"],
            registry=r,
        )
        r.register(_StoreCollector(store))
        r.register(_ThreadsCollector())
        self._server: Any = None

    def serve(self, address: str) -> int:
        """Serve /metrics on ``HOST:PORT`` (port 0: any); the port bound."""
        host, _, port = address.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
