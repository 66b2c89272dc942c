"""Moved: call_seconds and host_seconds to mxlogits.bench.timing, Limits and measure_limits to
mxlogits.bench.limits; this path works until the next release (a DeprecationWarning)."""
from .deprecated import warn_moved

warn_moved("mxlogits.bench_timing", "mxlogits.bench.timing and mxlogits.bench.limits")
from .bench.limits import PERF_BW, PERF_PEAK, Limits, measure_limits  # noqa: E402, F401
from .bench.timing import call_seconds, host_seconds  # noqa: E402, F401
