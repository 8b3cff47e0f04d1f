# Sourced by the one-call GPU scripts (`source "$(dirname "$0")/gpu_prelude.sh" NAME`): strict
# mode, $OUT (what the device returns), $R = /tmp/NAME (the call's scratch folder, tarred into
# $OUT at the end), unbuffered Python, and the GPUs named in the log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
R=/tmp/$1
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)

# ncu_source_profile DIR KERNEL_REGEX MODULE: Nsight Compute with PC sampling of `python3 -m
# MODULE` (its kernels matching KERNEL_REGEX), run in the current directory; writes DIR/prof.ncu-rep,
# its raw / source (SASS) / details pages and DIR/summary.txt (experiments/ncu_source_summary.py:
# stall reasons per launch, executed instructions and stall samples per opcode).
ncu_source_profile() {
  local dir=$1 kern=$2 module=$3
  [ -n "$NCU" ] || { echo "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu)"; return 1; }
  mkdir -p "$dir"
  timeout 240 "$NCU" --clock-control none -k "regex:$kern" -o "$dir/prof" --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --section ComputeWorkloadAnalysis --import-source no python3 -m "$module" \
    > "$dir/ncu_log.txt" 2>&1
  echo "$module: ncu rc=$?"; grep "launch " "$dir/ncu_log.txt"
  "$NCU" --import "$dir/prof.ncu-rep" --page raw --csv > "$dir/raw.csv" 2>&1
  "$NCU" --import "$dir/prof.ncu-rep" --page source --csv --print-source sass > "$dir/source.csv" 2>&1
  "$NCU" --import "$dir/prof.ncu-rep" --page details > "$dir/details.txt" 2>&1
  python3 "$REPO/experiments/ncu_source_summary.py" "$dir" > "$dir/summary.txt" 2>&1
}

# rollout_4l NAME TIMEOUT ENGINES CONTEXTS [ARGS...]: the 4-layer 30B decode step
# (bench_rollout.py --layers 4 --prefill_len 0 --kernel_layout --loop 8 --breakdown never, then
# ARGS, e.g. --steps 12) into $R/NAME/ and $R/NAME.txt; run from the repository root.
rollout_4l() {
  local name=$1 limit=$2 engines=$3 ctx=$4; shift 4
  timeout "$limit" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
    --layers 4 --prefill_len 0 --kernel_layout --loop 8 --contexts "$ctx" --engines "$engines" \
    --breakdown never --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}

# step_layout_ab TAR: the 4-layer FP4 step at 32K and 128K with the grouped kernel's rows and
# aligned x layouts, two alternating pairs (rows, aligned, rows, aligned: single pairs of this
# A/B differed by ~3%), $R tarred into $OUT/TAR after each arm; then their rows.
step_layout_ab() {
  local tarname=$1 pair lay
  for pair in 1 2; do
    for lay in rows aligned; do
      rollout_4l "step_${lay}_$pair" 100 fp4 32768,131072 --steps 16 --grouped_x_layout $lay
      tar -C "$R" -czf "$OUT/$tarname" .
    done
  done
  rollout_rows step_rows_1 step_aligned_1 step_rows_2 step_aligned_2
}

# rollout_48l NAME TIMEOUT: the full-depth (48-layer) step, bf16 + fp4 at 32K and 128K (as
# gpu_session15e.sh), with a time budget TIMEOUT - 30 s, into $R/NAME/ and $R/NAME.txt.
rollout_48l() {
  local name=$1 limit=$2
  timeout "$limit" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
    --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
    --contexts 32768,131072 --engines bf16,fp4 --time_budget_s $((limit - 30)) --out "$R/$name" \
    > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}

# rollout_budget NAME TIMEOUT TIME_BUDGET HBM_GB ENGINES CONTEXTS: the full-depth (48-layer) 30B
# decode step at an HBM budget of HBM_GB for every engine (session 39: an 80 GB card), skipping
# what is left after TIME_BUDGET s, into $R/NAME/ and $R/NAME.txt; prints its return code and
# result lines.
rollout_budget() {
  local name=$1 limit=$2 budget=$3 hbm=$4 engines=$5 ctx=$6
  timeout "$limit" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
    --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
    --hbm_gb "$hbm" --contexts "$ctx" --engines "$engines" --time_budget_s "$budget" \
    --out "$R/$name" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
  grep -E "ctx|Error" "$R/$name.txt" | cut -c1-160 | head -12
}

# show_table NAME...: the markdown table rows of each $R/NAME/*.md and the errors in $R/NAME.txt.
show_table() {
  local n f
  for n in "$@"; do
    f=$(ls "$R/$n"/*.md 2>/dev/null | head -1); [ -n "$f" ] && grep "^|" "$f" | cut -c1-500
    grep -iE "error|Traceback" "$R/$n.txt" 2>/dev/null | head -5
  done
}

# rollout_rows NAME...: the fp4 / bf16 rows (and errors) of each rollout_4l / rollout_48l run.
rollout_rows() {
  local n
  for n in "$@"; do
    grep -E "^\| (fp4|bf16) |Error|error" "$R/$n/rollout_throughput.md" "$R/$n.txt" 2>/dev/null \
      | sed "s/^/$n /" | cut -c1-140 | head -8
  done
}

# attention_check NAME TIMEOUT [ARGS...]: experiments/check_mgpu_attention.py ARGS into $R/NAME/
# (its kernels_attention_mgpu.{md,json}) and $R/NAME.txt, then its return code and error lines.
attention_check() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 "$REPO/experiments/check_mgpu_attention.py" --out "$R/$name" "$@" \
    > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
  grep -iE "error|Traceback" "$R/$name.txt" | head -5
}

# mgpu_attention_summary NAME: $R/NAME/kernels_attention_mgpu.json (check_mgpu_attention.py's
# output) as three lines per shape: device us, % of copy and relerr of every column.
mgpu_attention_summary() {
  python3 "$REPO/experiments/check_mgpu_attention.py" --summary "$R/$1/kernels_attention_mgpu.json"
}

# dense_summary NAME...: experiments/check_mgpu_matmul.py --summary of each $R/NAME/
# kernels_matmul_mgpu.json (a dense run: one line per row), then the run's error lines.
dense_summary() {
  local n
  for n in "$@"; do
    echo "== $n"
    python3 "$REPO/experiments/check_mgpu_matmul.py" --summary "$R/$n/kernels_matmul_mgpu.json"
    grep -hiE "^ *mgpu .*Error|Traceback" "$R/$n.txt" 2>/dev/null | sort | uniq -c | head -4
  done
}

# install_wheels: the carried wheels (.whl/: ml-collections, jax-triton, tensorboardX; the GPU
# host has no network) into /tmp/site, on PYTHONPATH with the repository; exits if pip fails.
install_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$REPO"/.whl/*.whl || { echo "wheel install failed (carry .whl)"; exit 1; }
  export PYTHONPATH=/tmp/site:$REPO
}

# diagnose_small LIMIT: trace_jax.diagnose on configs/small.py (random init) into
# $OUT/diagnose_small.json (stderr: $OUT/diag_stderr.txt), then its table.
diagnose_small() {
  timeout "$1" python3 -m trace_jax.diagnose --config=configs/small.py --json > "$R/diag.txt" \
    2> "$OUT/diag_stderr.txt"
  echo "diagnose rc=$?"
  tail -1 "$R/diag.txt" > "$OUT/diagnose_small.json"
  grep -iE "error|Traceback" "$OUT/diag_stderr.txt" | head -5
  python3 -c "
import json; from trace_jax import diagnose
print(diagnose.format_table(json.load(open('$OUT/diagnose_small.json'))))" 2>&1 | tail -12
}

# attention_table LIMIT MAX_SECONDS [ARGS...]: the issue's attention benchmark
# (pallas_kernels.bench_attention --device-time) into $R/attn/ and $R/attn.txt, then its rows.
attention_table() {
  local limit=$1 maxs=$2; shift 2
  timeout "$limit" python3 -m pallas_kernels.bench_attention --device-time --max-seconds "$maxs" \
    "$@" --out "$R/attn" > "$R/attn.txt" 2>&1
  echo "attention rc=$?"
}

# attention_table_rows: the table rows, notes and errors of attention_table's run.
attention_table_rows() {
  grep -E "^\| [0-9]" "$R/attn/kernels_attention.md" | cut -c1-220
  grep -E "^- |skipped" "$R/attn/kernels_attention.md" | cut -c1-200
  grep -iE "error|Traceback" "$R/attn.txt" | head -5
}

# late_vt_ab_if_h200: on an H200 only, issue 7's late_vt A/B (gpu_sessions/gpu_session39d.sh,
# ~2 min; its decision rule: pallas_kernels/NOTES.md), its files straight into $OUT/r39d (a call
# cut short keeps what was written); once per machine (a warm machine's next script skips it).
# Session 48 ran it and decided (NOTES_attention "Session 48"), so the scripts that call it skip
# it unless LATE_VT_AB=1.
late_vt_ab_if_h200() {
  [ "${LATE_VT_AB:-0}" = 1 ] || { echo "late_vt A/B: decided in session 48 (LATE_VT_AB=1 reruns it)"; return 0; }
  grep -q H200 <<<"$(nvidia-smi -L)" || return 0
  if [ -e /tmp/r39d_done ]; then echo "late_vt A/B: ran already on this machine"; return 0; fi
  OUT="$OUT/r39d" bash "$REPO/experiments/gpu_sessions/gpu_session39d.sh"
  touch /tmp/r39d_done
}

# ptxas_registers DIR [KEEP...]: the ptxas register and spill counts of the Mosaic kernels
# dumped under DIR (MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=DIR), in compile order; then
# every dump but *.ptxas, *.resources.txt and the suffixes KEEP (e.g. ptx) is deleted (the MLIR
# pass logs are ~45 MB a kernel). A kernel with setmaxnreg reads its entry count here.
ptxas_registers() {
  local dir=$1 f keep=(-name "*.ptxas" -o -name "*.resources.txt"); shift
  for f in "$@"; do keep+=(-o -name "*.$f"); done
  for f in $(ls -tr "$dir"/*.ptxas 2>/dev/null); do
    echo "$(basename "$f"): $(grep -hoE "Used [0-9]+ registers|[0-9]+ bytes spill stores" "$f" | tr '\n' ' ')"
  done | head -40
  find "$dir" -type f ! \( "${keep[@]}" \) -delete
}

# grouped_summary JSON: one line per config of a check_mgpu_matmul.py --grouped run
# (kernels_matmul_mgpu_grouped.json): call and kernel device time, % of copy, maxdiff.
grouped_summary() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(f"k={r['k']} n={r['n']} rows={r['rows']} max_group={r['max_group']}")
    for c in sorted(c[:-3] for c in r if c.endswith("_us") and not c.endswith("kernel_us")):
        print(f"  {c:24s} call {r[c + '_us']:7.2f}  kernel {r.get(c + '_kernel_us', float('nan')):7.2f}"
              f"  {r.get(c + '_pct_copy', float('nan')):5.1f}%  maxdiff {r.get(c + '_maxdiff', '-')}")
PY
}

# grouped_check NAME TOKENS SECONDS ARGS...: `check_mgpu_matmul.py --grouped` at TOKENS with
# ARGS into $R/NAME (its log $R/NAME.txt), at most SECONDS of timing, then its summary.
grouped_check() {
  local name=$1 tokens=$2 secs=$3; shift 3
  timeout $((secs + 20)) python3 "$REPO/experiments/check_mgpu_matmul.py" --grouped \
    --tokens "$tokens" --max-seconds "$secs" --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"; grep -iE "error|fail" "$R/$name.txt" | head -3
  grouped_summary "$R/$name/kernels_matmul_mgpu_grouped.json" | grep -v triton
}
