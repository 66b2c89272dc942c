"""Build and run tests/emulation/probe.cpp: single AMD instructions executed by the host emulation, one
wave per case, for the instruction tests. Each arch's probe is compiled once per test session, with the
flags of that arch's emulation build (instances.yaml `emulation`)."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mxlogits.build import build_flags, emulation_compiler
from mxlogits.manifest import manifest

PROBE = Path(__file__).with_name("probe.cpp")

needs_clang = pytest.mark.skipif(
    emulation_compiler() is None, reason="the host emulation builds with clang (clang++-22)"
)
EMULATED = [needs_clang, pytest.mark.toolchain]  # the marks of a test that runs the emulation


@functools.cache
def _binary(arch: str) -> Path:
    record = manifest().arches[arch]
    out = Path(tempfile.mkdtemp(prefix=f"mxlogits-probe-{arch}-")) / "probe"
    command = [emulation_compiler(), *build_flags(record, emulated=True), "-std=c++17", "-I",
               str(manifest().directory), str(PROBE), "-o", str(out), "-pthread"]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, f"building the {arch} probe failed:\n$ {' '.join(command)}\n{run.stderr}"
    return out


def run(arch: str, instruction: str, inputs: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    """Executes `instruction` on every case of `inputs` ([cases, lanes] of its In record); returns
    [cases, lanes] of out_dtype."""
    cases = inputs.shape[0]
    done = subprocess.run([str(_binary(arch)), instruction, str(cases)], input=inputs.tobytes(), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    return np.frombuffer(done.stdout, dtype=out_dtype).reshape(cases, inputs.shape[1])


def run_raw(arch: str, instruction: str, argument: int, data: bytes) -> bytes:
    done = subprocess.run([str(_binary(arch)), instruction, str(argument)], input=data, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    return done.stdout


# E2M1 codes (OCP MX v1.0): 0..7 the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign.
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)
ONE, SIX, MINUS_SIX, MINUS_ZERO = 2, 7, 15, 8


def e8m0(byte: np.ndarray) -> np.ndarray:
    """2^(byte - 127), NaN at 255 (OCP MX v1.0 E8M0)."""
    byte = np.asarray(byte, dtype=np.int64)
    return np.where(byte == 255, np.nan, np.ldexp(1.0, byte - 127))


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[..., 8 * n] E2M1 codes -> [..., n] uint32: element e in bits [4 (e % 8), 4 (e % 8) + 4) of dword e // 8."""
    c = codes.astype(np.uint32).reshape(*codes.shape[:-1], -1, 8)
    return (c << (4 * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)


def scaled_product(a, b, sa, sb, c=None):
    """What a scaled fp4 matrix instruction computes, per the AMD documents: D = C + sum over 32-element K
    blocks kb of (A . B on the block) x 2^(sa[row, kb] - 127) x 2^(sb[column, kb] - 127), rounded to float32
    once. a [cases, M, K] and b [cases, K, N] E2M1 codes, sa [cases, M, K/32], sb [cases, N, K/32]."""
    av, bv = E2M1[a], E2M1[b]
    d = np.zeros((a.shape[0], a.shape[1], b.shape[2])) if c is None else c.astype(np.float64).copy()
    for kb in range(a.shape[2] // 32):
        blk = slice(32 * kb, 32 * kb + 32)
        dot = np.einsum("cik,ckj->cij", av[:, :, blk], bv[:, blk, :])
        d = d + dot * e8m0(sa[:, :, kb])[:, :, None] * e8m0(sb[:, :, kb])[:, None, :]
    return d.astype(np.float32)


def one_hot_a(m: int, k: int, n: int):
    """A case per (row, k) of an m x k A: A 1.0 there alone (one nibble of one VGPR of one lane), B 1.0 on
    row k alone. Returns (a, b, the D each case must give: 1.0 on that row, every column)."""
    rows, ks = (x.ravel() for x in np.meshgrid(np.arange(m), np.arange(k), indexing="ij"))
    cases = np.arange(rows.size)
    a, b = np.zeros((rows.size, m, k), dtype=np.int64), np.zeros((rows.size, k, n), dtype=np.int64)
    a[cases, rows, ks] = ONE
    b[cases, ks, :] = ONE
    want = np.zeros((rows.size, m, n), dtype=np.float32)
    want[cases, rows, :] = 1.0
    return a, b, want


def one_hot_b(m: int, k: int, n: int):
    """A case per (k, column) of a k x n B: B 1.0 there alone, A 1.0 on column k alone. Returns (a, b, the D
    each case must give: 1.0 on that column, every row)."""
    ks, cols = (x.ravel() for x in np.meshgrid(np.arange(k), np.arange(n), indexing="ij"))
    cases = np.arange(ks.size)
    a, b = np.zeros((ks.size, m, k), dtype=np.int64), np.zeros((ks.size, k, n), dtype=np.int64)
    b[cases, ks, cols] = ONE
    a[cases, :, ks] = ONE
    want = np.zeros((ks.size, m, n), dtype=np.float32)
    want[cases, :, cols] = 1.0
    return a, b, want


def extreme_codes(m: int, k: int, n: int):
    """Cases of E2M1 codes at +-6 and +-0 filling A (m x k) and B (k x n): (a, b, the value every cell of D
    must hold at unit scales), the products exact at the format's ends and signed zeros summing to 0."""
    cases = [(SIX, MINUS_SIX, -36.0 * k), (MINUS_SIX, MINUS_SIX, 36.0 * k), (0, SIX, 0.0), (MINUS_ZERO, SIX, 0.0)]
    a = np.stack([np.full((m, k), x) for x, _, _ in cases])
    b = np.stack([np.full((k, n), y) for _, y, _ in cases])
    return a, b, np.array([v for _, _, v in cases], dtype=np.float32)


def random_operands(seed: int, cases: int, m: int, k: int, n: int):
    """(a, b, sa, sb, c): random E2M1 codes, block scales in [100, 150) and a normal fp32 C."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 16, (cases, m, k)), rng.integers(0, 16, (cases, k, n))
    sa, sb = rng.integers(100, 150, (cases, m, k // 32)), rng.integers(100, 150, (cases, n, k // 32))
    return a, b, sa, sb, rng.standard_normal((cases, m, n)).astype(np.float32)


def unit_scales(cases: int, m: int, k: int, n: int):
    """(sa, sb) of byte 127, 2^0, for every row of an m x k A and column of a k x n B, per K block."""
    return np.full((cases, m, k // 32), 127), np.full((cases, n, k // 32), 127)
