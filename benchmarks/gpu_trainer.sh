#!/usr/bin/env bash
# The product's trainer on one GPU, before and after the levers of issue 40, in one call on the same card:
# the qwen3-8b recipe as it stands, then with FlexAttention over packed rows, every 2nd layer recomputed, and both.
# Each variant is its own process (own compile caches and memory), cut at 170 s.
#   bash benchmarks/gpu_trainer.sh            # figures as JSON under $OUT/distill_trl (default logs/)
set -u
out=${OUT:-logs}/distill_trl
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$out/commit.txt"
variant() {
  local name=$1; shift
  echo "== $name: $*"
  timeout 170 python benchmarks/distill_throughput.py --trl --recipe qwen3-8b --shape qwen3-8b --liger \
    --trajectories 300 --steps 3 --warmup 1 --out "$out/$name.json" "$@" 2>&1 | grep -E '^\{|Error|error' | tail -3
}
variant recipe
variant flex --set attn=packed_flex
variant every2nd --set checkpoint_every=2
variant flex_every2nd --set attn=packed_flex checkpoint_every=2
