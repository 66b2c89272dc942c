"""tools/reproduce_results.sh, the one command behind bench/RESULTS.md's numbers: its usage, and with no GPU
visible a clear refusal before it writes anything (CI has no GPU; the steps themselves run on a GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys

from support.checkout import ROOT

SCRIPT = ROOT / "tools" / "reproduce_results.sh"


def run(*args: str, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": python, **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


def test_usage_is_named_when_the_output_folder_is_missing():
    result = run()
    assert result.returncode == 2
    assert "usage: [STEPS=bench,...] tools/reproduce_results.sh OUT [DEEPGEMM_TREE]" in result.stderr


def test_without_a_gpu_it_refuses_before_writing(tmp_path):
    out = tmp_path / "results"
    result = run(str(out))
    assert result.returncode == 2
    assert "no CUDA device visible" in result.stderr and "torch.cuda.is_available() is false" in result.stderr
    assert not out.exists()


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    result = run(str(tmp_path / "results"), STEPS="bench,benchmark")
    assert result.returncode == 2
    assert "STEPS: expected names among: bench indexer quantize gpu_tests deepgemm_test memcheck; found benchmark" \
        in result.stderr
    assert not (tmp_path / "results").exists()


def test_steps_run_only_the_named_ones(tmp_path):
    """With a stand-in python that says a GPU is there and logs each command: STEPS=indexer,gpu_tests runs those
    two, in the script's order, and neither the bench nor DeepGEMM's build (no bench: no peer columns to fill)."""
    calls = tmp_path / "calls"
    stand_in = tmp_path / "python"
    stand_in.write_text(f"""#!/bin/bash
echo "$*" >> {calls}
case "$*" in
  *torch.cuda.get_device_name*) echo h100 ;;
  *TABLES*) echo decode_mtp1 ;;
esac
""")
    stand_in.chmod(0o755)
    out = tmp_path / "results"
    result = run(str(out), str(tmp_path / "no-deepgemm"), python=str(stand_in), STEPS="indexer,gpu_tests")
    assert result.returncode == 0, result.stderr
    assert "all steps passed (indexer gpu_tests)" in result.stdout and "JSON and plot" not in result.stdout
    assert sorted(f.name for f in out.iterdir()) == ["gpu_tests.log", "indexer.log"]
    ran = [line for line in calls.read_text().splitlines() if not line.startswith("-c ")]
    assert ran == ["-m mxlogits.bench.indexer", "-m pytest -q -m gpu -p no:cacheprovider"]
