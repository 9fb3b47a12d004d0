// Package membench holds the memory benchmark, which is not part of the normal
// test run (it loads 100,000 memories into Postgres). Run it with
//
//	go test ./memory/membench -run '^$' -bench Memory -benchtime 1x -timeout 30m
//
// It reports, in one run: session append and read latency (p50/p99) of the
// Redis session store next to raw go-redis LPUSH/LRANGE on the same server;
// the long-term insert rate (single upserts and COPY); and, at 100,000 stored
// 384-dimension memories (clustered synthetic vectors), retrieval latency
// (p50/p99) and recall@10 of the HNSW index against an exact scan of the same
// table, for several hnsw.ef_search values. MEMBENCH_ROWS overrides 100000.
//
// The memory worker on one hot thread (turns/s beside a raw key-value put, with
// session decodes, encodes and revision conflicts per turn) is measured by
// BenchmarkHotThread in services/memory.
package membench
