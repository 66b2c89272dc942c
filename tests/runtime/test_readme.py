"""The README's usage example runs as written."""

from __future__ import annotations

import re

from support.checkout import ROOT

README = ROOT / "README.md"


def test_readme_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(README), "exec"), {})
    assert "max error" in capsys.readouterr().out
