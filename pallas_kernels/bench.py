"""All kernel benchmarks in one command (one H200 session runs them together):

    python -m pallas_kernels.bench [matmul|attention|all] [--out DIR] [--quick]

Each part prints its markdown table and writes JSON/MD under --out (default $OUT or
experiments/results). The parts are ``pallas_kernels.bench_matmul`` (FP4 GEMV/GEMM/grouped
expert matmul vs XLA bf16 and ragged_dot) and ``pallas_kernels.bench_attention`` (decode attention
over BF16/NVFP4/MXFP4 KV caches, KV append, fused quantize-with-hint).
"""

import os
import sys


def main(argv):
    which = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else "all"
    rest = [a for a in argv[1:] if a != which]
    if not any(a.startswith("--out") for a in rest):
        rest += ["--out", os.environ.get("OUT", "experiments/results")]
    if which not in ("matmul", "attention", "all"):
        raise SystemExit(f"unknown part {which!r}: matmul | attention | all")
    if which in ("matmul", "all"):
        from pallas_kernels import bench_matmul
        sys.argv = ["bench_matmul"] + rest
        bench_matmul.main()
    if which in ("attention", "all"):
        from pallas_kernels import bench_attention
        sys.argv = ["bench_attention"] + rest
        bench_attention.main()


if __name__ == "__main__":
    main(sys.argv)
