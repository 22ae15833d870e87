#!/usr/bin/env bash
# Session 28: the router's gate from global memory (MAGI2_ROUTER_GATE=global), through a shared-memory ring
# (ring, the default) and with the block's r rows in shared memory too (ring_r). Runs from the bundle folder
# (build-Fk3: the branch's magi2, bench_moe and CUDA tests, golden/dit_tiny, run.sh); BUDGET in seconds.
here=$(cd "$(dirname "$0")" && pwd); cd "$here" || exit 1
export MAGI2_GOLDEN_DIR=$here/golden MAGI2_FIXTURE_DIR=$here/fixtures
start=$(date +%s); BUDGET=${BUDGET:-250}; left() { echo $(( BUDGET - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
full=""; case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) full="--full-model";; esac
for g in ring_r ring; do
  echo "== test_cuda_fused Router* gate=$g"; MAGI2_ROUTER_GATE=$g timeout 60 ./run.sh ./test_cuda_fused --gtest_filter='*Router*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror" | cut -c1-200 | head -8
done
for g in global ring ring_r; do
  echo "== bench_moe router, gate=$g (left $(left))"; MAGI2_ROUTER_GATE=$g timeout 60 ./run.sh ./bench_moe 29872 2>&1 | grep -E "router, fused \(|ceiling" | cut -c1-160 | head -5
done
for g in ring_r global; do
  echo "== magi2 bench $full 272p gate=$g (left $(left))"
  MAGI2_ROUTER_GATE=$g timeout 60 ./run.sh ./magi2 bench --weights fp8-experts $full --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8 --resolutions 272p 2>&1 | grep -E "step|router|mhc|routed" | cut -c1-200 | head -6
done
echo "== test_cuda_dit_step (left $(left))"; timeout 60 ./run.sh ./test_cuda_dit_step 2>&1 | grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror" | cut -c1-200 | head -8
for g in ring_r ring; do [ "$(left)" -gt 45 ] || break
  echo "== magi2 bench $full 272p gate=$g (left $(left))"
  MAGI2_ROUTER_GATE=$g timeout 60 ./run.sh ./magi2 bench --weights fp8-experts $full --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8 --resolutions 272p 2>&1 | grep -E "step|router" | cut -c1-200 | head -3
done
[ "$(left)" -gt 50 ] && { echo "== test_cuda_backend_ops (left $(left))"; timeout $(( $(left) - 5 )) ./run.sh ./test_cuda_backend_ops --gtest_filter='*EveryOp*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" | cut -c1-200 | head -8; }
echo "left $(left)"
