"""Learning benchmark: does the memory make a simulated kernel-writing agent
better over a stream of tasks, and which credit and consolidation rules help?

The real Engine (SQLite store, FTS5/BM25 retrieval, ATU credit, UGC
consolidation, lesson dedup) runs unchanged; only the agent and the kernel
outcomes are simulated. See docs/learning-benchmark.md.
"""
