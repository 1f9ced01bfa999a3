#!/usr/bin/env bash
# Several source trees' CLI benchmarks, alternating on one GPU, over a list of flag sets (dense,
# a window, softcap, ALiBi, sinks ...): scripts/device_ab.sh once per flag set, the summaries
# gathered in one file (the device call returns at most 8 files). Optionally ncu on one cell.
#   AB_TREES="main=. poly=.device/trees/wip-poly" AB_BACKEND=flash-sm90 \
#   VARIANTS="|--window 1024,0|--softcap 30" [AB_HEAD_DIMS=128] [AB_SEQLENS=16384] \
#   [NCU_ARGS="--head-dim 128 --heads 16 --batch 1 --seqlens 16384;--head-dim 64 ..."] \
#   bash scripts/device_variants_ab.sh [ROUNDS]
# VARIANTS: '|'-separated flag sets (an empty one is the dense cell). Output: $OUT/variants-ab.txt
# (each flag set's ab-summary), $OUT/variants-ab-runs.txt (every run's line), $OUT/ncu-N.txt
# (one per ';'-separated NCU_ARGS cell: `flashattn bench` flags).
set -uo pipefail
rounds=${1:-2}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
: > "$out/variants-ab.txt"
: > "$out/variants-ab-runs.txt"
IFS='|' read -ra sets <<< "${VARIANTS:-}"
[ ${#sets[@]} -eq 0 ] && sets=("")
for args in "${sets[@]}"; do
  tmp=$(mktemp -d)
  start=$(date +%s)
  OUT=$tmp AB_ARGS="$args" bash scripts/device_ab.sh "$rounds" > "$tmp/stdout" 2>&1
  rc=$?
  {
    echo "== flags: '${args}' (rc=$rc, $(( $(date +%s) - start )) s)"
    cat "$tmp/ab-summary.txt" 2>/dev/null || tail -20 "$tmp/stdout"
    echo
  } | tee -a "$out/variants-ab.txt"
  cat "$tmp/ab.txt" >> "$out/variants-ab-runs.txt" 2>/dev/null
  cat "$tmp/ab-build.log" >> "$out/ab-build.log" 2>/dev/null
  rm -rf "$tmp"
done

if [ -n "${NCU_ARGS:-}" ]; then
  # The first tree's CLI, one launch of the backend's kernel after two, clocks left alone; one
  # profile per ';'-separated cell: $OUT/ncu-N.txt.
  first=${AB_TREES%% *}
  cli=build-ab-${first%%=*}/tools/flashattn/flashattn
  IFS=';' read -ra cells <<< "$NCU_ARGS"
  n=0
  for cell in "${cells[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    timeout 300 ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-flash_sm90}" \
      --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
      "$cli" bench --device cuda --backends "${AB_BACKEND:-flash-sm90}" --warmup 2 --iters 2 \
      $cell > "$out/ncu-$n.txt" 2>&1
    echo "== ncu $n ($cell): rc=$?"
    grep -E "Duration|Compute \(SM\)|DRAM Throughput|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued" \
      "$out/ncu-$n.txt" | head -12
    grep -E "issue_stalled_.*ratio" "$out/ncu-$n.txt" | awk '$NF + 0 > 0.05' | sort -k3 -gr |
      head -10
    grep -E "sm__(inst_executed_pipe|pipe)_.*pct_of_peak" "$out/ncu-$n.txt" | awk '$NF + 0 > 5' |
      sort -k3 -gr | head -12
  done
fi
