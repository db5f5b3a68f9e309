"""Example queries on the Parquet table the job writes (Spark SQL, view ``hive_events``).

    spark = hive_ext_spark.stream.session()
    register(spark, "/data/hive-parquet")
    spark.sql(MESSAGES_PER_TOPIC_PER_MINUTE).show()
"""

from __future__ import annotations

from hive_ext_spark._deps import require

require("pyspark", "the example queries")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

VIEW = "hive_events"

MESSAGES_PER_TOPIC_PER_MINUTE = """
SELECT topic,
       window(timestamp, '1 minute').start AS minute,
       count(*) AS messages
FROM hive_events
GROUP BY topic, window(timestamp, '1 minute')
ORDER BY minute, topic
"""

# A device is the client that published; ties on the timestamp go to the later sequence.
LATEST_VALUE_PER_DEVICE = """
SELECT device, topic, CAST(payload AS STRING) AS value, timestamp
FROM (
  SELECT client_id AS device, topic, payload, timestamp,
         row_number() OVER (PARTITION BY client_id
                            ORDER BY timestamp DESC, node_id DESC, sequence DESC) AS newest
  FROM hive_events
)
WHERE newest = 1
ORDER BY device
"""

QUERIES = {"per-minute": MESSAGES_PER_TOPIC_PER_MINUTE, "latest": LATEST_VALUE_PER_DEVICE}


def register(spark: SparkSession, parquet: str, view: str = VIEW) -> DataFrame:
    """The table as a temporary view (Spark reads only the batches the job committed)."""
    table = spark.read.parquet(parquet)
    table.createOrReplaceTempView(view)
    return table
