"""Paths of the checkout the tests run in."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
GENERATED = ROOT / "generated"
STUB_ARCHES = ROOT / "tests" / "fixtures" / "stub_arches"  # minimal arch bodies of each family
