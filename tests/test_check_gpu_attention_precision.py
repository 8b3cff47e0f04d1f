"""experiments/check_gpu_attention_precision.py on the CPU, where every f32 product is exact f32:
the trainer's attention and the decode attention with f32 P sit at float32 rounding from
float64, the decode attention with bf16 P at a bf16 rounding of P (what the script then
measures on a GPU, where the default precision differs)."""

from tests._scripts import load_experiment

CG = load_experiment("check_gpu_attention_precision")


def test_f32_paths_are_f32_accurate_and_bf16_p_is_not():
    got = dict(CG.measure(*CG.SHAPES[0]))
    assert len(got) == 10
    assert "trainer causal_attention, P bf16" in got
    for name, err in got.items():
        if "P bf16" in name:
            assert 1e-4 < err < 3e-3, (name, err)
        else:
            assert err < 2e-6, (name, err)
