"""The machine limits the roofline divides by (docs/performance.md): memory bandwidth from a large
device-to-device copy, compute peak from a large fp8 matmul (fp32 on the host, the cpu arch's
arithmetic), each the best of several runs: a limit is what the machine can reach."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .timing import call_seconds

PERF_BW, PERF_PEAK = 4.17e12, 1324e12  # an H200's, measured so (docs/performance.md): copy bytes/s, fp8 flop/s


@dataclass(frozen=True)
class Limits:
    bw: float  # bytes/s
    peak: float  # flop/s
    source: str  # how each was obtained


def _copy_bandwidth(device: torch.device, nbytes: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / min(call_seconds([lambda: dst.copy_(src)], device, 10))  # bytes read + written


def _fp8_peak(device: torch.device, n: int = 8192) -> float:
    a = torch.randn((n, n), device=device).to(torch.float8_e4m3fn)
    b = torch.randn((n, n), device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
    one = torch.ones((), device=device)
    mm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return 2 * n**3 / min(call_seconds([mm], device, 10))


def _host_peak(n: int = 2048) -> float:
    a, b = torch.randn((n, n)), torch.randn((n, n))
    return 2 * n**3 / min(call_seconds([lambda: a @ b], torch.device("cpu"), 3))


def measure_limits(device: torch.device, bw: float | None = None, peak: float | None = None) -> Limits:
    """Bandwidth and peak of `device`, each measured unless given (bytes/s, flop/s). On a GPU where
    a measurement fails (no fp8 matmul, no memory) it falls back to an H200's figure (docs/performance.md), and
    the source says so."""
    notes = []
    if bw is not None:
        notes.append("bandwidth given")
    elif device.type == "cuda":
        try:
            bw = _copy_bandwidth(device, 1 << 31)
            notes.append("bandwidth: 2 GiB device copy")
        except RuntimeError as e:  # out of memory, most likely
            bw = PERF_BW
            notes.append(f"bandwidth: an H200's figure, docs/performance.md (the copy failed: {str(e).splitlines()[0]})")
    else:
        bw = _copy_bandwidth(device, 1 << 28)
        notes.append("bandwidth: 256 MiB host copy")
    if peak is not None:
        notes.append("peak given")
    elif device.type == "cuda":
        try:
            peak = _fp8_peak(device)
            notes.append("peak: fp8 e4m3 matmul 8192^3")
        except (RuntimeError, AttributeError, TypeError) as e:
            peak = PERF_PEAK
            notes.append(f"peak: an H200's fp8 figure, docs/performance.md (no fp8 matmul here: {str(e).splitlines()[0]})")
    else:
        peak = _host_peak()
        notes.append("peak: fp32 host matmul 2048^3")
    return Limits(bw, peak, "; ".join(notes))
