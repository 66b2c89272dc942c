"""Schedule builds for compute-sanitizer's racecheck (and synccheck), on every variant of the
GPU's arch:

    compute-sanitizer --tool racecheck python tools/racecheck_schedule.py [plans]

Builds `plans` (default 50) random plans per variant on the GPU and compares each schedule with
the host's: bit-exact against the cpu builder of the same (q_per_block, block_k, setup weight) at the same
grid, else against the model of docs/schedule.md (tests/support/schedule_model.py). Prints PASS/FAIL per variant and
exits 1 on a mismatch. Without a GPU arch of the instance table this prints "no GPU arch
present" and exits 0."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the suite's support package

from support.params import GPU_ARCH, GPU_VARIANTS  # noqa: E402
from support.schedule_model import compare_with_host, host_twin, random_plan  # noqa: E402


def main(argv: list[str]) -> int:
    if GPU_ARCH is None:
        print("no GPU arch present")
        return 0
    plans = int(argv[0]) if argv else 50
    failures = 0
    for v in GPU_VARIANTS:
        rng = random.Random(4242 + v.q_per_block * 1000 + v.block_k)
        specs = [random_plan(rng, v) for _ in range(plans)]
        against = f"cpu {host_twin(v).name}" if host_twin(v) else "the model of docs/schedule.md"
        try:
            compare_with_host(v, specs, "cuda")
        except AssertionError as e:
            failures += 1
            why = (str(e) or repr(e)).splitlines()[0]
            print(f"FAIL {v.arch}/{v.name}: {plans} plans against {against}: {why}", flush=True)
        else:
            print(f"PASS {v.arch}/{v.name}: {plans} plans against {against}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
