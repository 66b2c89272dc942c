"""Moved to mxlogits.bench.tune_yaml; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.bench_tune_yaml", "mxlogits.bench.tune_yaml", __name__)
