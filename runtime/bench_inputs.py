"""Moved to mxlogits.bench.inputs; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.bench_inputs", "mxlogits.bench.inputs", __name__)
