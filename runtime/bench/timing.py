"""Timing of one call: the device's time of each call after an L2 flush (as triton's do_bench), and
the host's time of an eager call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

_FLUSH_BYTES = 256 << 20  # over four times an H200's 60 MB L2
_flush_buffers: dict[torch.device, torch.Tensor] = {}


def _flush(device: torch.device) -> None:
    """Writes more than the L2 holds: evicts the next call's inputs, and keeps the GPU busy for
    longer than the host needs to enqueue that call."""
    if device not in _flush_buffers:
        _flush_buffers[device] = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device=device)
    _flush_buffers[device].zero_()


def call_seconds(calls: Sequence[Callable[[], object]], device: torch.device, repeats: int) -> list[float]:
    """Device seconds of each of `repeats` timed calls that rotate through `calls` (each with its
    own working set). Every call runs once untimed first: the first call of an op builds and loads
    its module. On a GPU, CUDA events on the current stream bracket the call alone, after an L2
    flush (as triton's do_bench): the call finds a cold cache and is already enqueued when the GPU
    reaches it, so the time is the device's, the host's launch overhead excluded (host_seconds
    measures that). On the host the call's wall time."""
    for call in calls:
        call()
    if device.type != "cuda":
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            calls[i % len(calls)]()
            times.append(time.perf_counter() - start)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    torch.cuda.synchronize(device)
    for i, (start, stop) in enumerate(events):
        _flush(device)
        start.record()
        calls[i % len(calls)]()
        stop.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(stop) / 1e3 for start, stop in events]


def alternated_medians(calls: Sequence[Callable[[], object]], device: torch.device, repeats: int) -> list[float]:
    """Each call's median device seconds over `repeats` timings, the calls timed in turn (call_seconds's
    rotation), so that none of them runs at a hotter clock than another: what a ratio of two needs."""
    times = call_seconds(calls, device, len(calls) * repeats)
    return [statistics.median(times[i :: len(calls)]) for i in range(len(calls))]


def host_seconds(calls: Sequence[Callable[[], object]], device: torch.device, repeats: int) -> float:
    """Host seconds one eager GPU call takes (checks, dispatch, launch), from `repeats` calls issued
    back to back without waiting for the device. The calls have run before (call_seconds warms
    them). On the host a call is synchronous: its host time is call_seconds's."""
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(repeats):
        calls[i % len(calls)]()
    seconds = (time.perf_counter() - start) / repeats
    torch.cuda.synchronize(device)
    return seconds


def capture(fn, device: torch.device):
    """A no-argument callable that reruns `fn` (a CUDA-graph replay on the GPU), and fn's result:
    warmed up on a side stream first, as graph capture wants."""
    if device.type != "cuda":
        return fn, fn()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    graph.replay()
    return graph.replay, result


def replay_us(fn, device: torch.device, replays: int = 200) -> float:
    """Median device µs of one replay of a CUDA graph holding fn alone, each replay between its own events
    after an L2 flush (call_seconds's protocol): the replay finds a cold cache and is already enqueued when
    the GPU reaches it, so the host's graph launch (several µs) is not in the time."""
    replay, _ = capture(fn, device)
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _flush(device)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)
