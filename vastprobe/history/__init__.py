"""Fleet memory: a store beside the pipeline, fed the same finished reports the renderers get.

`store` writes each sweep into the history (`engine`: an SQLite file or a shared PostgreSQL
database; `bulk` its many-row steps) and answers what changed for each host, keeping each host's
features of its last `--group-by` run so that `report.outliers` compares hosts of one job across
shards; `queries` reads per-host histories back; `transfer` exports and imports a history; `shard`
splits an inventory between controllers. Rules stay pure functions of one snapshot: every
comparison across sweeps lives here. Nothing here is imported unless asked for."""
