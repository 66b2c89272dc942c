"""Moved to mxlogits.bench.tune_report; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.bench_tune_report", "mxlogits.bench.tune_report", __name__)
