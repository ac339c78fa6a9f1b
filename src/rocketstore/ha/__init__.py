"""Replication over RocketMQ 4.9's HA protocol: ``frames`` (the wire format), ``master``, ``slave``."""
