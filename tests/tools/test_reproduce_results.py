"""tools/reproduce_results.sh, the one command behind bench/RESULTS.md's numbers: its usage, and with no GPU
visible a clear refusal before it writes anything (CI has no GPU; the steps themselves run on a GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys

from support.checkout import ROOT

SCRIPT = ROOT / "tools" / "reproduce_results.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


def test_usage_is_named_when_the_output_folder_is_missing():
    result = run()
    assert result.returncode == 2
    assert "usage: tools/reproduce_results.sh OUT [DEEPGEMM_TREE]" in result.stderr


def test_without_a_gpu_it_refuses_before_writing(tmp_path):
    out = tmp_path / "results"
    result = run(str(out))
    assert result.returncode == 2
    assert "no CUDA device visible" in result.stderr and "torch.cuda.is_available() is false" in result.stderr
    assert not out.exists()
