-- Idempotent detector writes: a detection cycle killed between writing its scores / events and its watermark is
-- run again after a restart with the same insert_deduplication_token (detector/detection/job.py), and the block
-- it already wrote is then stored once. A non-replicated MergeTree deduplicates only with this window set (the
-- cluster variant's Replicated tables deduplicate by default: the cluster rewrite leaves these statements out).
-- Additive and idempotent: applied to existing tables on every start.
ALTER TABLE otel.loop_scores MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE otel.loop_events MODIFY SETTING non_replicated_deduplication_window = 1000;
