"""hostcap's benchmarks: every figure a ratio to a baseline measured in the same run.

`python -m bench [--quick]` (or `make bench` / `make bench-quick`) starts real
daemons on private sockets, measures each row of issue 7 interleaved with its
baseline, prints one table and writes the JSON to bench/results/. See
bench/README.md for what each figure means.
"""
