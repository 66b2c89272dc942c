"""tools/kernel_ab.py on the host: it takes a base revision's committed generated/ and refuses one whose
runtime/ differs from the checkout's (it loads both sides' kernels with the checkout's runtime), reads
ncu's CSV report into launch times in µs whatever the unit (and, with --counters, each launch's
instructions, issue rate and DRAM throughput in their columns' units), compares the rounds launch by launch, and
without ncu says so and exits 2. CI has no GPU, so this keeps the tool from drifting unseen."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from support.checkout import ROOT


def load_tool():
    spec = importlib.util.spec_from_file_location("kernel_ab", ROOT / "tools" / "kernel_ab.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def commit(repo, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    def run(*args: str):
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)

    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return run("rev-parse", "HEAD").stdout.strip()


def test_base_generated_taken_and_a_runtime_difference_refused(tmp_path):
    tool = load_tool()
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = commit(repo, {"runtime/op.py": "a = 1\n", "generated/manifest.json": '{"v": 1}'}, "first")
    commit(repo, {"templates/k.j2": "x\n", "generated/manifest.json": '{"v": 2}'}, "kernels only")
    got = tool.export_generated(first, tmp_path / "out", root=repo)
    assert (got / "manifest.json").read_text() == '{"v": 1}'
    commit(repo, {"runtime/op.py": "a = 2\n"}, "runtime")
    with pytest.raises(tool.AbError, match="runtime/ differs between"):
        tool.export_generated(first, tmp_path / "again", root=repo)
    with pytest.raises(tool.AbError, match="git rev-parse"):
        tool.export_generated("no-such-revision", tmp_path / "none", root=repo)


def test_base_folder_taken_and_a_runtime_difference_refused(tmp_path):
    """A GPU machine gets the working tree without its history: the base side comes as an exported folder."""
    tool = load_tool()
    for tree, value in (("checkout", "1"), ("base", "1")):
        (tmp_path / tree / "runtime" / "__pycache__").mkdir(parents=True)
        (tmp_path / tree / "runtime" / "op.py").write_text(f"a = {value}\n")
    (tmp_path / "checkout" / "runtime" / "__pycache__" / "op.pyc").write_bytes(b"only here")
    assert tool.export_generated(str(tmp_path / "base"), tmp_path / "unused", root=tmp_path / "checkout") \
        == tmp_path / "base" / "generated"
    (tmp_path / "base" / "runtime" / "op.py").write_text("a = 2\n")
    with pytest.raises(tool.AbError, match="runtime/ differs between"):
        tool.export_generated(str(tmp_path / "base"), tmp_path / "unused", root=tmp_path / "checkout")
    (tmp_path / "base" / "runtime" / "op.py").write_text("a = 1\n")
    (tmp_path / "base" / "runtime" / "extra.py").write_text("")
    with pytest.raises(tool.AbError, match="runtime/ differs between"):
        tool.export_generated(str(tmp_path / "base"), tmp_path / "unused", root=tmp_path / "checkout")


HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def report_row(i: int, kernel: str, unit: str, value: str, metric: str = "gpu__time_duration.sum") -> str:
    fields = [str(i), "1", "python", "h", kernel, "1", "7", "(640, 1, 1)", "(132, 1, 1)", "0", "9.0",
              "Command line profiler metrics", metric, unit, value]
    return ",".join(f'"{f}"' for f in fields)


REPORT = "\n".join([
    "==PROF== Connected to process 1",
    "a line the command printed",
    ",".join(f'"{f}"' for f in HEADER),
    report_row(0, "void k<1>(A)", "nsecond", "4,512"),
    report_row(1, "void logits_kernel<T>(K)", "usecond", "226.50"),
    report_row(2, "void logits_kernel<T>(K)", "msecond", "1.73"),
])


def times(tool, report: str) -> list[tuple[str, float]]:
    return [(name, values[tool.METRIC]) for name, values in tool.launches(report)]


def test_report_read_into_launch_times():
    tool = load_tool()
    assert times(tool, REPORT) == [
        ("void k<1>(A)", pytest.approx(4.512)),
        ("void logits_kernel<T>(K)", pytest.approx(226.5)),
        ("void logits_kernel<T>(K)", pytest.approx(1730.0)),
    ]
    with pytest.raises(tool.AbError, match="unknown unit"):
        tool.launches(REPORT.replace('"msecond"', '"cycle"'))
    # the short units of the ncu on the lent H100s (2026-12-07)
    short = REPORT.replace('"nsecond"', '"ns"').replace('"usecond"', '"us"').replace('"msecond"', '"ms"')
    assert times(tool, short) == times(tool, REPORT)


INSTRUCTIONS, ISSUE, DRAM = "smsp__inst_executed.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active", \
    "dram__bytes_read.sum.per_second"
COUNTED = "\n".join([
    ",".join(f'"{f}"' for f in HEADER),
    report_row(0, "void logits_kernel<T>(K)", "Tbyte/second", "2.30", DRAM),
    report_row(0, "void logits_kernel<T>(K)", "usecond", "234.60"),
    report_row(0, "void logits_kernel<T>(K)", "inst", "128,700,000", INSTRUCTIONS),
    report_row(0, "void logits_kernel<T>(K)", "%", "66.5", ISSUE),
    report_row(1, "void k<1>(A)", "Gbyte/second", "310.5", DRAM),
    report_row(1, "void k<1>(A)", "ns", "4,512"),
    report_row(1, "void k<1>(A)", "Kinst", "12.5", INSTRUCTIONS),
    report_row(1, "void k<1>(A)", "%", "3.0", ISSUE),
])


def test_counters_read_per_launch_in_their_columns_units():
    tool = load_tool()
    (k0, c0), (k1, c1) = tool.launches(COUNTED, counters=True)
    assert (k0, k1) == ("void logits_kernel<T>(K)", "void k<1>(A)")
    assert c0 == {"gpu__time_duration.sum": pytest.approx(234.6), INSTRUCTIONS: pytest.approx(128.7),
                  ISSUE: pytest.approx(66.5), DRAM: pytest.approx(2.3)}
    assert c1 == {"gpu__time_duration.sum": pytest.approx(4.512), INSTRUCTIONS: pytest.approx(0.0125),
                  ISSUE: pytest.approx(3.0), DRAM: pytest.approx(0.3105)}
    assert times(tool, COUNTED) == [(k0, pytest.approx(234.6)), (k1, pytest.approx(4.512))]
    # the short form of the lent H100s' ncu (2026-12-07)
    short = COUNTED.replace('"Tbyte/second"', '"Tbyte/s"').replace('"Gbyte/second"', '"Gbyte/s"')
    assert tool.launches(short, counters=True) == tool.launches(COUNTED, counters=True)
    with pytest.raises(tool.AbError, match="unknown unit 'Xbyte/second'"):
        tool.launches(COUNTED.replace('"Tbyte/second"', '"Xbyte/second"'), counters=True)
    lacking = "\n".join(line for line in COUNTED.splitlines() if not ('"1"' in line[:4] and ISSUE in line))
    with pytest.raises(tool.AbError, match=r"launch 1 \(void k<1>\(A\)\) has no " + ISSUE.replace(".", r"\.")):
        tool.launches(lacking, counters=True)


def test_options_after_base_are_the_tools_and_the_command_follows_the_separator():
    tool = load_tool()
    argv = ["f608e67", "--kernel", "logits_kernel", "--rounds", "3", "--", "python", "-c", "x", "--kernel", "y"]
    assert tool.split_command(argv) == (argv[:5], ["python", "-c", "x", "--kernel", "y"])
    assert tool.split_command(["f608e67"]) == (["f608e67"], [])


def test_rounds_compared_launch_by_launch():
    tool = load_tool()
    def launch(name, us, instructions=None):
        return name, {tool.METRIC: us, **({INSTRUCTIONS: instructions} if instructions else {})}

    rounds = {"base": [[launch("k", 2.0), launch("m", 4.0)], [launch("k", 2.2), launch("m", 4.4)]],
              "head": [[launch("k", 1.0), launch("m", 5.0)]] * 2}
    rows = tool.compare(rounds)
    assert [(r["launch"], r["kernel"], r["us"]) for r in rows] == [
        (0, "k", {"base": [2.0, 2.2], "head": [1.0, 1.0]}),
        (1, "m", {"base": [4.0, 4.4], "head": [5.0, 5.0]}),
    ]
    assert all("counters" not in r for r in rows)
    counted = tool.compare({"base": [[launch("k", 2.0, 9.0)]], "head": [[launch("k", 1.0, 7.0)]]})
    assert counted[0]["counters"] == {"M warp instructions": {"base": [9.0], "head": [7.0]}}
    with pytest.raises(tool.AbError, match="different numbers of launches"):
        tool.compare({"base": [[launch("k", 1.0)]], "head": [[launch("k", 1.0), launch("k", 1.0)]]})
    with pytest.raises(tool.AbError, match="different numbers of launches"):  # a third side's count checked too
        tool.compare({**rounds, "late2": [[launch("k", 1.0)]] * 2})


def test_further_sides_compared_and_tabled_against_the_base():
    """--also: each candidate a side of its own, every ratio over the base's median (not over the head's)."""
    tool = load_tool()
    def launch(name, us, instructions):
        return name, {tool.METRIC: us, INSTRUCTIONS: instructions}

    rows = tool.compare({"base": [[launch("k", 2.0, 8.0)], [launch("k", 4.0, 8.0)]],
                         "head": [[launch("k", 3.0, 6.0)]] * 2,
                         ".base/late2": [[launch("k", 1.5, 4.0)], [launch("k", 1.5, 2.0)]]})
    assert rows[0]["us"] == {"base": [2.0, 4.0], "head": [3.0, 3.0], ".base/late2": [1.5, 1.5]}
    assert rows[0]["counters"]["M warp instructions"][".base/late2"] == [4.0, 2.0]
    sides = ["base", "head", ".base/late2"]
    lines = tool.table(rows, sides, "us", "kernel", ".2f", " µs")
    assert lines[0] == ("| launch | kernel | base µs | head µs | .base/late2 µs | head / base (medians) | "
                        ".base/late2 / base (medians) |")
    assert lines[2] == "| 0 | k | 2.00 4.00 | 3.00 3.00 | 1.50 1.50 | 1.000 | 0.500 |"
    assert tool.table(rows, sides, "counters", "counter", ".3g")[2] == \
        "| 0 | M warp instructions | 8 8 | 6 6 | 4 2 | 0.750 | 0.375 |"


@pytest.mark.parametrize("also", [["x", "x"], ["HEAD"], ["head"]])
def test_a_side_given_twice_refused_before_anything_runs(also):
    argv = [arg for side in also for arg in ("--also", side)]
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "kernel_ab.py"), "HEAD", *argv, "--", "true"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "--also: expected sides other than the base and each other" in result.stderr


def test_without_ncu_it_says_so(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kernel_ab.py"), "HEAD", "--", "true"],
        capture_output=True, text=True, env={"PATH": str(tmp_path)}, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ncu (Nsight Compute) not found" in result.stderr
