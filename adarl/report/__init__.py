"""Look at runs: `python -m adarl.report RUN_DIR [RUN_DIR ...]` (adarl/report/command.py).

Part of the core, as evaluation is: a run's record from its `metrics.jsonl`
(adarl/report/records.py) and the figures drawn from records (adarl/report/figures.py). The
benchmarks' reports (adarl/bench) stand on the same records and figures.
"""
