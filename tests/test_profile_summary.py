"""experiments/profile_summary.py: per-kernel device time from a jax.profiler trace."""

import json
import os
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments import profile_summary as PS  # noqa: E402


def test_summarize_sums_per_kernel_and_divides_by_calls():
    ev = [PS.Event("gemm", "dot.1", 300.0), PS.Event("gemm", "dot.1", 500.0),
          PS.Event("copy", "copy.2", 200.0), PS.Event("gemm", "dot.7", 1000.0)]
    s = PS.summarize(ev, n_calls=2)
    assert s["busy_ns_per_call"] == pytest.approx(1000.0)
    assert s["launches_per_call"] == pytest.approx(2.0)
    rows = [(r["kernel"], r["hlo_op"], r["ns_per_call"], r["launches_per_call"]) for r in s["rows"]]
    assert rows == [("gemm", "dot.7", 500.0, 0.5), ("gemm", "dot.1", 400.0, 1.0),
                    ("copy", "copy.2", 100.0, 0.5)]
    assert sum(r["pct_busy"] for r in s["rows"]) == pytest.approx(100.0)
    md = PS.render_md(s, top=2)
    assert "| `gemm` | `dot.7` | 0.5 | 0.5 | 50.0 |" in md and "(1 more)" in md
    with pytest.raises(ValueError, match="n_calls"):
        PS.summarize(ev, n_calls=0)


def test_profile_calls_finds_the_jitted_ops(tmp_path):
    f = jax.jit(lambda a, b: jnp.tanh(a @ b))
    a = jnp.ones((128, 256), jnp.float32)
    b = jnp.ones((256, 64), jnp.float32)
    s = PS.profile_calls(lambda: f(a, b), n=3, trace_dir=str(tmp_path / "tr"))
    assert s["n_calls"] == 3 and s["busy_ns_per_call"] > 0 and s["wall_ns_per_call"] > 0
    ops_seen = " ".join(r["hlo_op"] + " " + r["kernel"] for r in s["rows"])
    assert "dot" in ops_seen or "tanh" in ops_seen, ops_seen


def test_latest_xplane_names_the_missing_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match="xplane"):
        PS.latest_xplane(str(tmp_path))


# bench_rollout --profile_steps end to end: tests/test_bench_rollout.py::
# test_kernel_layout_routes_expert_matmuls_to_the_pallas_kernels


def test_idle_gaps_merge_overlapping_streams():
    ev = [PS.Event("a", "", 100.0, 0.0), PS.Event("b", "", 50.0, 80.0),  # overlap: busy 0..130
          PS.Event("c", "", 10.0, 200.0), PS.Event("d", "", 10.0, 215.0)]
    gaps = PS.idle_gaps(ev)
    assert [(g["idle_ns"], g["after"], g["before"]) for g in gaps] == [(70.0, "b", "c"),
                                                                        (5.0, "c", "d")]


def test_devtime_measures_device_time_and_copy_bandwidth():
    from pallas_kernels import devtime

    f = jax.jit(lambda a: jnp.sin(a) * 2)
    t = devtime.device_seconds(f, jnp.ones((1 << 16,), jnp.float32), n=2)
    assert 0 < t < 1.0
    assert devtime.copy_bandwidth_device(1 << 16, n=2) > 0


def test_devtime_kernel_filter_keeps_only_matching_kernels():
    from pallas_kernels import devtime

    summary = {"busy_ns_per_call": 100.0,
               "rows": [{"kernel": "loop_add_fusion", "ns_per_call": 30.0},
                        {"kernel": "decode_attention_nvfp4_v4", "ns_per_call": 60.0},
                        {"kernel": "decode_attention_bf16", "ns_per_call": 5.0}]}
    assert devtime.selected_seconds(summary) == pytest.approx(100e-9)
    assert devtime.selected_seconds(summary, "attention") == pytest.approx(65e-9)
    assert devtime.selected_seconds(summary, "nvfp4") == pytest.approx(60e-9)
    with pytest.raises(RuntimeError, match="no_such_kernel"):
        devtime.selected_seconds(summary, "no_such_kernel")
    # and through a real profile: an unmatched filter raises, "" matches every kernel
    f = jax.jit(lambda a: jnp.sin(a) * 2)
    x = jnp.ones((1 << 16,), jnp.float32)
    with pytest.raises(RuntimeError, match="no_such_kernel"):
        devtime.device_seconds(f, x, n=2, kernel="no_such_kernel")
    assert devtime.device_seconds(f, x, n=2, kernel="") > 0


def test_write_sweep_tables_and_compilecheck_cli(tmp_path, capsys):
    """The sweeps' result files (markdown table + JSON rows) and the compile checks' CLI."""
    from pallas_kernels import devtime
    from pallas_kernels import matmul_compilecheck as mc

    rows = [{"name": "a", "us": 1.5}, {"name": "b", "us": 2.0}]
    lines = ["# t", "", "| name | us |", "|---|---|", "| a | 1.5 |", "| b | 2.0 |"]
    devtime.write_sweep(str(tmp_path / "out"), "s", lines, rows, 4.0e12)
    assert (tmp_path / "out" / "s.md").read_text().splitlines() == lines
    got = json.loads((tmp_path / "out" / "s.json").read_text())
    assert got["rows"] == rows and got["copy_tbs"] == 4.0 and got["jax"]
    assert capsys.readouterr().out.splitlines() == lines[-4:]

    a = devtime.sweep_parser("Doc line.\nmore", 12.0, "h").parse_args(["--quick", "--top", "2"])
    assert (a.max_seconds, a.quick, a.top) == (12.0, True, 2) and a.out.endswith("results")

    defaults = {"x": {"k": 1}}
    out, cfg = mc.cli_configs(["prog"], defaults, str(tmp_path / "d"))
    assert out == str(tmp_path / "d") and cfg == defaults and os.path.isdir(out)
    out, cfg = mc.cli_configs(["prog", str(tmp_path / "e"), "y=dict(k=2, fmt='mxfp4')"],
                              defaults, "/unused")
    assert out == str(tmp_path / "e") and cfg == {"y": {"k": 2, "fmt": "mxfp4"}}
    with pytest.raises(SystemExit, match="usage"):  # an option is not taken for OUTDIR
        mc.cli_configs(["prog", "--help"], defaults, "/unused")
    assert not os.path.exists("--help")
    assert "FP4_FORCE_COMPILE" not in os.environ  # set by _patch only: CPU tests stay interpreted


def test_devtime_table_lines_keep_every_key_and_mark_missing_ones():
    """Rows with different keys (a failed run leaves some out): one column per key, the last
    row's order first, "-" where a row lacks the key, floats to 4 significant digits."""
    from pallas_kernels import devtime
    lines = devtime.table_lines([dict(shape="a", t_us=12.34567, err=1e-5),
                                 dict(shape="b", t_us=3.0, pct=70.12345)])
    assert lines[:2] == ["| shape | t_us | pct | err |", "|---|---|---|---|"]
    assert lines[2:] == ["| a | 12.35 | - | 1e-05 |", "| b | 3 | 70.12 | - |"]
    assert devtime.format_row(dict(shape="a", t_us=12.34567)) == "  shape=a  t_us=12.35"


def test_sweep_header_names_the_device_and_the_command():
    from pallas_kernels import devtime
    lines = devtime.sweep_header("My sweep", "python x.py", "a note.", ["--a", "1"])
    assert lines[0].startswith("# My sweep: ") and "(jax " in lines[0]
    assert lines[1:] == ["", "command: `python x.py --a 1`", "", "a note.", ""]


def test_mgpu_attention_check_variants_and_summary(tmp_path, monkeypatch):
    """check_mgpu_attention.py's variant specs (keyword sets, unknown keywords refused by name),
    their column names, the Triton call each Triton variant makes (bf16_p: P's precision,
    bf16_partials: the partials' dtype), and --summary's lines from a written sweep."""
    from experiments import check_mgpu_attention as CM
    from pallas_kernels import devtime
    assert CM.parse_variants("") == [{}]
    v = CM.parse_variants("sub=2,lazy_sum=1;num_splits=8")
    assert v == [{"sub": 2, "lazy_sum": 1}, {"num_splits": 8}]
    assert [CM.variant_name(x) for x in v] == ["s2L1", "p8"]
    with pytest.raises(SystemExit, match="unknown variant keyword 'sbu'"):
        CM.parse_variants("sbu=2")
    t = CM.parse_variants(";num_splits=64;split_target=4096", CM._TRITON_SHORT)
    assert t == [{}, {"num_splits": 64}, {"split_target": 4096}]
    assert [CM.variant_name(x, CM._TRITON_SHORT) for x in t] == ["default", "p64", "T4096"]
    with pytest.raises(SystemExit, match="unknown variant keyword 'sub'"):
        CM.parse_variants("sub=2", CM._TRITON_SHORT)  # a Mosaic knob is not a Triton one
    seen = []  # the Triton call's precision, partial dtype and split count per variant
    monkeypatch.setattr(CM, "decode_attention_triton", lambda *a, **kw: seen.append(
        (kw["precision"], kw["partial_dtype"], kw.get("num_splits"))))
    cache = types.SimpleNamespace(codes=jnp.zeros((32, 4, 8192, 64), jnp.uint8), fmt="nvfp4")
    for kw in CM.parse_variants(";bf16_partials=1;bf16_p=1,num_splits=4;fp4_split_target=4096;"
                                "fp4_split_target=1024", CM._TRITON_SHORT):
        CM._triton(None, (cache, cache), None, **kw)
    # 32 x 8K, 4 KV heads: the rule's 4096 programs -> 32 splits (256 rows), 1024 -> 8 (1024)
    assert seen == [("f32", None, None), ("f32", jnp.bfloat16, None), ("bf16", None, 4),
                    ("f32", None, 32), ("f32", None, 8)]
    assert CM.AT.FP4_SPLIT_TARGET == 4096  # set only while the split count is picked
    for bad in ({"num_splits": 2}, {"split_target": 4096}, {"block_k": 64}):
        with pytest.raises(SystemExit, match=f"drop {next(iter(bad))}"):
            CM._triton(None, (cache, cache), None, fp4_split_target=1024, **bad)
    short = types.SimpleNamespace(codes=jnp.zeros((5, 4, 1000, 64), jnp.uint8), fmt="nvfp4")
    with pytest.raises(SystemExit, match="multiple of 32"):  # the kernel would use 16-row blocks
        CM._triton(None, (short, short), None, fp4_split_target=1024)
    with pytest.raises(SystemExit, match="Triton variant F1024p2: fp4_split_target sets"):
        CM.main(["--no-time", "--no-mosaic", "--triton-variants", "fp4_split_target=1024,"
                 "num_splits=2", "--shapes", "1:64", "--out", str(tmp_path)])
    rows = [dict(batch=8, context=1024, mgpu_us=10.0, mgpu_pct_copy=50.0, mgpu_relerr=1e-5,
                 triton_us=12.5, triton_pct_copy=40.0, triton_relerr=2e-5)]
    devtime.write_sweep(str(tmp_path), "kernels_attention_mgpu", ["# t"], rows, 4.3e12)
    lines = CM.summary_lines(str(tmp_path / "kernels_attention_mgpu.json"))
    assert lines == ["copy TB/s 4.300", "8 1024 mgpu=10.0  triton=12.5",
                     "   pct mgpu=50.0  triton=40.0", "   relerr mgpu=1e-05  triton=2e-05"]


def test_mgpu_matmul_check_summary(tmp_path):
    """check_mgpu_matmul.py --summary: one line per dense row, sorted by shape, M and time, with
    the knobs a row carries (booleans as 0 / 1, a timing probe by name, none where empty) and the
    bf16 time where measured."""
    from experiments import check_mgpu_matmul as CM
    from pallas_kernels import devtime
    rows = [dict(k=64, n=128, m=8, tk=256, steps=4, splits=2, tiles=1, serial=False,
                 mgpu_us=12.0, mgpu_pct_copy=70.0, mgpu_relerr=5e-5, maxdiff_t1=None,
                 bf16_us=30.5),
            dict(k=64, n=128, m=8, tk=256, steps=4, splits=2, tiles=2, serial=True,
                 mgpu_us=11.0, mgpu_pct_copy=76.0, mgpu_relerr=5e-5, maxdiff_t1=0.0),
            dict(k=64, n=128, m=1, tk=128, steps=2, splits=1, mgpu_us=20.0,
                 mgpu_pct_copy=40.0, mgpu_relerr=1e-4, diag=""),
            dict(k=64, n=128, m=1, tk=128, steps=2, splits=1, mgpu_us=15.0,
                 mgpu_pct_copy=53.3, mgpu_relerr=0.9, diag="no_decode")]
    devtime.write_sweep(str(tmp_path), "kernels_matmul_mgpu", ["# t"], rows, 4.3e12)
    assert CM.summary_lines(str(tmp_path / "kernels_matmul_mgpu.json")) == [
        "64x128 M=  1 tk=128 st=2 sp=1 diag=no_decode   15.00 us  53.3% err=9.0e-01 d1=None",
        "64x128 M=  1 tk=128 st=2 sp=1   20.00 us  40.0% err=1.0e-04 d1=None",
        "64x128 M=  8 tk=256 st=4 sp=2 t=2 ser=1   11.00 us  76.0% err=5.0e-05 d1=0.0",
        "64x128 M=  8 tk=256 st=4 sp=2 t=1 ser=0   12.00 us  70.0% err=5.0e-05 d1=None "
        "bf16=30.5"]


def test_mgpu_matmul_check_parses_and_refuses_probes(capsys):
    """check_mgpu_matmul.py --diag: probes in order, a stream probe with an optional CTA cap; a
    misspelt probe, a cap on a probe that streams nothing alone or one that is no positive
    integer, or a cap without --grouped stops before any GPU work, naming it."""
    from experiments import check_mgpu_matmul as CM
    assert CM.parse_probes("no_decode,stream_only:2,x_only") == [
        ("no_decode", None), ("stream_only", 2), ("x_only", None)]
    for spec, msg in (("no_decode,nodecode", "unknown probe 'nodecode'"),
                      ("no_decode:2", "'no_decode:2': a CTA cap"),
                      ("weights_only:0", "'weights_only:0': a CTA cap"),
                      ("x_only:two", "'x_only:two': a CTA cap")):
        with pytest.raises(SystemExit):
            CM.main(["--grouped", "--diag", spec])
        assert msg in capsys.readouterr().err, spec
    with pytest.raises(SystemExit):
        CM.main(["--diag", "stream_only:2"])
    assert "for --grouped only" in capsys.readouterr().err


def test_mgpu_swiglu_check_parses_and_refuses_knobs():
    """check_mgpu_swiglu.py --knobs: the default first, then each ';'-separated set; an unknown
    knob, a non-integer, an nt that does not tile N, or a widths other than 0 / 1 stops before
    any GPU work, naming it."""
    from experiments import check_mgpu_swiglu as CS
    assert CS.parse_knobs("tk=128;widths=0,steps=3") == [{}, {"tk": 128},
                                                         {"widths": 0, "steps": 3}]
    assert CS.parse_knobs("serial=0,nt=2;mp=16") == [{}, {"serial": 0, "nt": 2}, {"mp": 16}]
    for bad, msg in (("width=0", r"unknown knob\(s\) \['width'\]"), ("tk=x", "not name=integer"),
                     ("nt=5", "nt=5 does not tile"), ("widths=2", "widths=2"),
                     ("nt=0", "nt=0 does not")):
        with pytest.raises(SystemExit, match=msg):
            CS.parse_knobs(bad)


def test_mgpu_matmul_check_parses_and_refuses_knobs(capsys):
    """check_mgpu_matmul.py --grouped --knobs: mp:tk:steps triples in order; a triple short of a
    field or an mp off the multiple of 8 stops before any GPU work, naming the list; so does a
    --widths list that is not ints, or (with --knobs) a width that does not fit the first
    config's chunk rows (mp + 8 on the rows layout, mp on the aligned one)."""
    from experiments import check_mgpu_matmul as CM
    assert CM.parse_knobs("56:256:2,40:128:3") == ((56, 256, 2), (40, 128, 3))
    for bad in ("56:256", "52:256:2", "56:256:x", ""):
        with pytest.raises(SystemExit, match="expected mp:tk:steps"):
            CM.parse_knobs(bad)
    with pytest.raises(SystemExit, match="--knobs '56:256'"):
        CM.main(["--grouped", "--knobs", "56:256"])
    with pytest.raises(SystemExit):
        CM.main(["--grouped", "--widths", "32,40;x"])
    assert "--widths '32,40;x'" in capsys.readouterr().err
    assert CM.parse_widths("32,40;48") == ((32, 40), (48,))
    for layout, bad in (("rows", "64"), ("rows", "12"), ("aligned", "56")):
        with pytest.raises(SystemExit):
            CM.main(["--grouped", "--x-layout", layout, "--knobs", "56:256:2",
                     "--widths", f"32,40;{bad}"])
        assert f"chunk widths [{bad}]" in capsys.readouterr().err


def test_grouped_edge_check_parses_and_flags_every_kind_of_difference():
    """check_mgpu_grouped_edge.py: variants / knobs / shapes parse or exit naming the bad part;
    a check passes only when every repeat equals the default bit for bit, holds no NaN and
    equals the first run, and the failures are kept by label."""
    import jax.numpy as jnp
    from experiments import check_mgpu_grouped_edge as CE
    assert CE.parse_variants("nt=1;tk=128,steps=3") == [{"nt": 1}, {"tk": 128, "steps": 3}]
    v = CE.parse_variants("tk=128,GROUPED_TILES=2")
    assert CE.split_variant(v[0]) == ({"tk": 128}, {"GROUPED_TILES": 2})
    assert CE.parse_knobs("SERIAL_TILES=0,GROUPED_TILES=2") == {"SERIAL_TILES": 0,
                                                                "GROUPED_TILES": 2}
    assert CE.parse_shapes("2048x768,128x768") == [(2048, 768), (128, 768)]
    for fn, bad, msg in ((CE.parse_variants, "tk=x", "tk=x"),
                         (CE.parse_variants, "", "at least one"),
                         (CE.parse_variants, "tk=128;cta_wgs=3", r"\['cta_wgs'\] not keyword"),
                         (CE.parse_variants, "NO_SUCH_KNOB=1", r"\['NO_SUCH_KNOB'\] not integer"),
                         (CE.parse_variants, "GROUPED_WIDTHS=1", r"\['GROUPED_WIDTHS'\] not"),
                         (CE.parse_variants, "_DIAG=1", r"\['_DIAG'\] not integer"),
                         (CE.parse_knobs, "NO_SUCH_KNOB=1", "NO_SUCH_KNOB"),
                         (CE.parse_knobs, "GROUPED_WIDTHS=1", "GROUPED_WIDTHS"),
                         (CE.parse_knobs, "SERIAL_TILES=yes", "SERIAL_TILES=yes"),
                         (CE.parse_shapes, "2048,768", "2048,768")):
        with pytest.raises(SystemExit, match=msg):
            fn(bad)
    base = jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)
    calls = iter(range(100))
    run = CE.EdgeCheck(repeats=3)
    assert run.check("same", lambda b: b, (base,), base)
    assert not run.check("off by one", lambda b: b.at[1, 2].add(1), (base,), base)
    assert not run.check("nan", lambda b: b.at[0, 0].set(jnp.nan), (base,), base)
    assert not run.check("racy", lambda b: b.at[0, 0].add(next(calls) % 2 * 1.0), (base,), base)
    assert run.failures == ["off by one", "nan", "racy"]
