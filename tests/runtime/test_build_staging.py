"""The build cache's key and its staging: the device compiler's version is part of a module's name, a
build happens in a staging directory renamed into place, so a killed build never leaves a half module,
and a cached module is never taken for sources that differ from the manifest its key came from."""

from __future__ import annotations

import dataclasses
import re
import shutil

import pytest
from mxlogits import build
from mxlogits.manifest import GENERATED_DIR_ENV, manifest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(build.JIT_ENV, "1")
    return tmp_path / "cache"


@pytest.fixture
def generated_copy(tmp_path, monkeypatch):
    copy = tmp_path / "generated"
    shutil.copytree(manifest().directory, copy)
    monkeypatch.setenv(GENERATED_DIR_ENV, str(copy))
    manifest.cache_clear()
    yield copy
    manifest.cache_clear()  # the next reader sees the restored environment


def _fake_compile(arch, directory, name, build_dir, emulated):
    assert not any(build_dir.iterdir()), "the staging directory starts empty"
    (build_dir / f"{name}.so").write_bytes(b"a module")


def test_module_name_changes_with_the_device_compiler(monkeypatch):
    cuda = dataclasses.replace(manifest().arches["cpu"], name="fake", family="cuda", target="sm_90a")
    names = set()
    for version in ("Cuda compilation tools, release 13.0", "Cuda compilation tools, release 13.4"):
        monkeypatch.setattr(build, "device_compiler_version", lambda family, v=version: v)
        names.add(build.module_name(cuda))
    assert len(names) == 2


def test_a_build_that_dies_leaves_no_module_and_the_next_one_completes(cache, monkeypatch):
    def killed(arch, directory, name, build_dir, emulated):
        (build_dir / f"{name}.so").write_bytes(b"half a module")
        raise KeyboardInterrupt  # the process is stopped mid-link

    monkeypatch.setattr(build, "_compile", killed)
    with pytest.raises(KeyboardInterrupt):
        build.built_library("cpu")
    assert build.cached_library("cpu") is None
    assert not [p for p in cache.rglob("*.so") if ".building" not in str(p)], "a half module is in place"

    monkeypatch.setattr(build, "_compile", _fake_compile)
    library = build.built_library("cpu")
    assert library.read_bytes() == b"a module" and build.cached_library("cpu") == library
    assert not list(cache.glob("*.building")), "the staging directory was renamed into place"


def test_a_cached_module_is_not_taken_for_hand_edited_sources(cache, generated_copy, monkeypatch):
    monkeypatch.setattr(build, "_compile", _fake_compile)
    assert build.built_library("cpu").read_bytes() == b"a module"
    body = generated_copy / "cpu" / "body.h"
    body.write_text(body.read_text() + "\n")
    # The module's name comes from the manifest's hash, which the edit did not change.
    with pytest.raises(RuntimeError, match=re.escape(f"{body} differs from manifest.json")):
        build.built_library("cpu")
