"""Adding a variant is adding a YAML row: --check fails until regenerated, then the runtime
serves the new variant and reports the new cta_resident (from the manifest and from the
compiled traits)."""

from __future__ import annotations

import json
import shutil

from mxlogits_codegen.cli import main as gen_main
from support.checkout import ROOT
from support.processes import python

NEW_ROW = "  - {arch: cpu, name: qlen2_kv128, q_per_block: 2, block_k: 128, cta_resident: 32}\n"


def test_a_new_yaml_row_reaches_the_runtime(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in ("templates", "generated"):
        shutil.copytree(ROOT / part, repo / part)
    text = (ROOT / "instances.yaml").read_text()
    old = "name: qlen1_kv64,  q_per_block: 1, block_k: 64,  cta_resident: 128"
    assert old in text
    (repo / "instances.yaml").write_text(text.replace(old, old.replace("128", "96")) + NEW_ROW)

    capsys.readouterr()
    assert gen_main(["--root", str(repo), "--check"]) == 1
    diff = capsys.readouterr().out
    assert "+++ generated/cpu/instance_qlen2_kv128.cpp" in diff and '"cta_resident": 96' in diff
    assert gen_main(["--root", str(repo)]) == 0
    assert gen_main(["--root", str(repo), "--check"]) == 0

    code = """
import json, torch, mxlogits as mx, mxlogits.demo as d
v = {x.name: x for x in mx.variants('cpu')}
rows = [(0, 0, 500 + j + 1) for j in range(7)] + [(1, 0, 200 + j + 1) for j in range(5)]
r = d.run_case('prefill', d.make_scene([507, 205], rows, 'cpu'), 'qlen2_kv128', torch.device('cpu'), 1)
print(json.dumps({'names': sorted(v), 'resident': v['qlen1_kv64'].cta_resident,
                  'grid': mx.plan_buffers('cpu', 4, 4, 'qlen1_kv64').num_ctas,
                  'new_grid': mx.plan_buffers('cpu', 4, 4, 'qlen2_kv128').num_ctas,
                  'ok': r['ok'], 'variant': r['variant'].name}))
"""
    out = python(code, env={"MXLOGITS_GENERATED_DIR": str(repo / "generated")}).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert "qlen2_kv128" in result["names"]
    assert result["resident"] == 96 and result["grid"] == 96 and result["new_grid"] == 32
    assert result["ok"] and result["variant"] == "qlen2_kv128"
