"""python -m mxlogits {demo,info,build,bench} [--device DEV] (bench: see python -m mxlogits bench --help)"""

from __future__ import annotations

import argparse
import sys

import torch

from .arch import arch_of
from .bench.cli import add_arguments as bench_arguments
from .bench.cli import run as run_bench
from .build import JIT_ENV, built_library, cache_dir, cached_library, jit_enabled, module_name
from .manifest import default_variant, manifest, tolerance, variants


def _device(arg: str | None) -> torch.device:
    if arg:
        return torch.device(arg)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def info(device: torch.device) -> None:
    m = manifest()
    print(f"device        {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    try:
        arch = arch_of(device)
    except RuntimeError as e:
        print(f"arch          none: {e}")
        arch = None
    print(f"torch         {torch.__version__}")
    print(f"table         H={m.heads} D={m.head_dim} PAGE={m.page_size}  ({m.directory})")
    print(f"build cache   {cache_dir()}  (JIT {'on' if jit_enabled() else f'off: {JIT_ENV}=0'})")
    for name, a in sorted(m.arches.items()):
        library = cached_library(name)
        state = f"built: {library}" if library else f"not built (would be {cache_dir() / module_name(a)})"
        here = "  <- this device" if name == arch else ""
        print(f"arch {name:8} {a.family} {a.target}, {a.scale_layout} layout, {state}{here}")
        for v in variants(name):
            atol, rtol = tolerance(v)
            mark = " (default)" if v == default_variant(name) else ""
            print(
                f"  {v.name:14} q_per_block {v.q_per_block:2}  block_k {v.block_k:4}  cta_resident {v.cta_resident:5}"
                f"  atol {atol:g} rtol {rtol:g}{mark}"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxlogits")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", help="torch device (default: cuda if present, else cpu)")
    commands = ap.add_subparsers(dest="command", required=True, metavar="{demo,info,build,bench}")
    commands.add_parser("demo", parents=[common], help="run the op on this device against the reference")
    commands.add_parser("info", parents=[common], help="device, arch, variants, build cache")
    commands.add_parser("build", parents=[common], help="build this device's module ahead of time")
    bench_arguments(
        commands.add_parser(
            "bench", parents=[common], help="the performance tables (docs/performance.md) on this device: µs, TFLOP/s, TB/s, %% of roofline"
        )
    )
    args = ap.parse_args(argv)
    device = _device(args.device)
    if args.command == "info":
        info(device)
        return 0
    try:
        arch = arch_of(device)
    except RuntimeError as e:
        print(f"{e}\n(pass --device cpu to run on the host)", file=sys.stderr)
        return 2
    if args.command == "build":
        print(built_library(arch))
        return 0
    if args.command == "bench":
        return run_bench(args, device)
    from .demo import demo

    return 0 if demo(device) else 1


if __name__ == "__main__":
    sys.exit(main())
