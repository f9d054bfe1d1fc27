-- The hottest functions of the last hour in the tailprof store, in DuckDB.
-- Same numbers as `tailprof top --store STORE --since 1h` (self samples).
-- Run:  duckdb -c ".read examples/store-duckdb.sql"                  (store /var/lib/tailprof)
--       duckdb -c "SET VARIABLE store = '/tmp/store'" -c ".read examples/store-duckdb.sql"
-- or:   python3 -c "import duckdb; duckdb.sql(\"SET VARIABLE store = 'STORE'\"); print(duckdb.sql(open('examples/store-duckdb.sql').read()))"
SET VARIABLE store = coalesce(getvariable('store'), '/var/lib/tailprof');
WITH samples AS (
    SELECT *
    FROM read_parquet(getvariable('store') || '/samples/*/*/*/*.parquet', hive_partitioning = true)
    WHERE window_end > now() - INTERVAL 1 HOUR
),
symbols AS (
    SELECT * FROM read_parquet(getvariable('store') || '/symbols/*.parquet')
)
SELECT
    coalesce(y.name,
             CASE WHEN s.build_id = 'kernel' THEN '[kernel]'
                  WHEN s.build_id = '' THEN '[unknown]'
                  ELSE '[' || regexp_extract(s.binary_path, '[^/]*$') || '+0x' || lower(hex(s.leaf_offset)) || ']' END) AS function,
    sum(s.count) AS self_samples,
    round(100.0 * sum(s.count) / sum(sum(s.count)) OVER (), 2) AS self_pct
FROM samples s
LEFT JOIN symbols y
  ON s.build_id = y.build_id
 AND s.leaf_offset >= y.start_offset
 AND s.leaf_offset < y.start_offset + greatest(y.size, 1)
GROUP BY 1
ORDER BY self_samples DESC
LIMIT 30;
