"""Runs -> the papers' tables: collect run/sweep directories, aggregate seeds, render Markdown/CSV/LaTeX and a plot.

    python -m genlab.report outputs/txl_ptb_mini/multirun_* --rows model.mem_len --cols model.n_layer
"""

from genlab.report.collect import ReportError, RunResult, collect_runs, write_multirun_summary
from genlab.report.table import (
    Table,
    attach_reference,
    build_table,
    load_reference,
    table_files,
    to_csv,
    to_latex,
    to_markdown,
)

__all__ = [
    "ReportError",
    "RunResult",
    "Table",
    "attach_reference",
    "build_table",
    "collect_runs",
    "load_reference",
    "table_files",
    "to_csv",
    "to_latex",
    "to_markdown",
    "write_multirun_summary",
]
