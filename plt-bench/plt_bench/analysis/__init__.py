"""What a campaign's stored trials say: the statistics and the ways they are shown.

    stats    cells (records.CellStats) and comparisons (records.Comparison) of any axis against a
             reference; throughput, latency, establishment and CPU tables
    report   the report: terminal text, report.md, report.html and the CSVs
    plots    the figures: a heatmap per pair, loss, jitter, size, CPU, throughput, latency
    summary  the short per-cell tables of `plt-bench summary` and the pytest runner

It reads records (plt_bench.records) and the store; nothing here runs a trial.
"""
