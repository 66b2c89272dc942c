"""The compute-sanitizer tools (tools/memcheck_cases.py, tools/racecheck_schedule.py) start on any
machine: their imports of the suite's builders resolve, and with no GPU visible each says so and
exits 0. CI has no GPU, so this is what keeps a moved test helper from breaking them unseen."""

from __future__ import annotations

import pytest
from support.checkout import ROOT
from support.processes import python


@pytest.mark.parametrize("tool", ["memcheck_cases.py", "racecheck_schedule.py"])
def test_gpu_tool_starts_without_a_gpu(tool):
    code = f"import runpy; runpy.run_path({str(ROOT / 'tools' / tool)!r}, run_name='__main__')"
    result = python(code, env={"CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert result.returncode == 0, f"{tool} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip() == "no GPU arch present"
