"""Moved to mxlogits.bench.tune; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.bench_tune", "mxlogits.bench.tune", __name__)
