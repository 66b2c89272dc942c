"""python -m mxlogits {info,build,demo}: what the main job prints and how it fails."""

from __future__ import annotations

from support.processes import python

MAIN = "import sys, mxlogits.__main__ as m; sys.exit(m.main(sys.argv[1:]))"


def run(*args, check=True):
    return python(f"import sys; sys.argv = ['mxlogits', *{list(args)!r}]; {MAIN}", check=check)


def test_info_lists_arch_variants_and_cache():
    out = run("info", "--device", "cpu").stdout
    assert "arch cpu" in out and "<- this device" in out
    assert "qlen1_kv64" in out and "(default)" in out and "build cache" in out


def test_build_prints_the_module():
    assert run("build", "--device", "cpu").stdout.strip().endswith(".so")


def test_demo_passes_on_the_host():
    out = run("demo", "--device", "cpu").stdout
    assert "decode MTP=1" in out and "causal prefill" in out and "PASS" in out


def test_a_device_without_an_arch_is_an_error_not_a_fallback():
    result = run("demo", "--device", "meta", check=False)
    assert result.returncode == 2
    assert "no arch runs on device type 'meta'" in result.stderr and "--device cpu" in result.stderr
