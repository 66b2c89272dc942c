"""A table's render over the real templates plus the stub arches (tests/fixtures/stub_arches): minimal
bodies of each family, for the reports' and the family guards' end-to-end tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from mxlogits_codegen.cli import write
from mxlogits_codegen.render import render_all
from mxlogits_codegen.table import load_table

from .checkout import STUB_ARCHES, TEMPLATES


def render_stub(tmp: Path, table: str) -> Path:
    """The real templates plus the stub arches, rendered from `table` into tmp/generated."""
    templates = tmp / "templates"
    shutil.copytree(TEMPLATES, templates)
    for stub in STUB_ARCHES.iterdir():
        shutil.copytree(stub, templates / "arch" / stub.name)
    (tmp / "instances.yaml").write_text(table)
    write(tmp / "generated", render_all(load_table(tmp / "instances.yaml", templates), templates))
    return tmp / "generated"
