"""Fleet memory: a store beside the pipeline, fed the same finished reports the renderers get.

`store` writes each sweep into an SQLite file and answers what changed for each host; `queries`
reads per-host histories back; `outliers` compares hosts of one job within a sweep; `shard`
splits an inventory between controllers. Rules stay pure functions of one snapshot: every
comparison across sweeps or hosts lives here. Nothing here is imported unless asked for."""
