"""Segment files: naming, memory mapping, ordered queues of segments, pre-allocation."""
