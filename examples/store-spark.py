"""The hottest functions of the last hour in the tailprof store, in Spark SQL (PySpark,
local mode). Same numbers as `tailprof top --store STORE --since 1h` (self samples).

    python3 -m pip install pyspark
    python3 examples/store-spark.py /var/lib/tailprof

Spark discovers the host=/date=/hour= partitions itself (basePath), so a store shared by
many hosts is one table.
"""
import sys

from pyspark.sql import SparkSession

store = sys.argv[1] if len(sys.argv) > 1 else "/var/lib/tailprof"
spark = SparkSession.builder.master("local[*]").appName("tailprof-store").getOrCreate()
spark.read.option("basePath", f"{store}/samples").parquet(f"{store}/samples/*/*/*/*.parquet").createOrReplaceTempView("samples")
spark.read.parquet(f"{store}/symbols/*.parquet").createOrReplaceTempView("symbols")
spark.sql(
    """
    SELECT coalesce(y.name,
                    CASE WHEN s.build_id = 'kernel' THEN '[kernel]'
                         WHEN s.build_id = '' THEN '[unknown]'
                         ELSE concat('[', regexp_extract(s.binary_path, '[^/]*$', 0), '+0x', lower(hex(s.leaf_offset)), ']') END) AS function,
           sum(s.count) AS self_samples,
           round(100.0 * sum(s.count) / sum(sum(s.count)) OVER (), 2) AS self_pct
    FROM samples s
    LEFT JOIN symbols y
      ON s.build_id = y.build_id
     AND s.leaf_offset >= y.start_offset
     AND s.leaf_offset < y.start_offset + greatest(y.size, 1)
    WHERE s.window_end > current_timestamp() - INTERVAL 1 HOUR
    GROUP BY 1
    ORDER BY self_samples DESC
    LIMIT 30
    """
).show(30, truncate=False)
spark.stop()
