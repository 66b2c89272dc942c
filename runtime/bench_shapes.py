"""Moved to mxlogits.bench.shapes; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.bench_shapes", "mxlogits.bench.shapes", __name__)
