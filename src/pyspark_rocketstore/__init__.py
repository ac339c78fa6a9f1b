"""Found by Spark when it looks for Python data sources (modules named ``pyspark_*`` with a
``DefaultSource``): ``spark.read.format("rocketstore")`` works without registering anything."""

from rocketstore.spark.source import RocketStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
