"""The broker: ``rocketstore serve`` and the consumer state under it."""
