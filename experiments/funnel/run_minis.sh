#!/usr/bin/env bash
# The measured CPU runs of experiments/funnel/README.md, one after another: the real-data mini's acceptance run (M1,
# B1-1-1H64 MLM, seed 0), then the FLOPs-matched pair B3-3-3H64D2 / L7H64 for seeds 0, 1, 2, the two models of
# a seed back to back so that both see about the same machine load (its /proc/loadavg is logged before and
# after every run); `midi`: the same pair at midi size (funnel_wiki_{b3_3_3,l7}_mlm_midi). Usage, from the
# repository root:
#   OUT=/tmp/funnel_runs bash experiments/funnel/run_minis.sh            # [m1] [pair] [midi] to run only a part
# Every run writes <OUT>/<preset>_s<seed>/ (metrics.json, csv/metrics.csv, checkpoints/, train.log).
set -euo pipefail
OUT=${OUT:-outputs/funnel_minis}
PY=${PY:-python}
PARTS=${*:-m1 pair}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"

run() {  # preset seed
    local dir="$OUT/$1_s$2"
    if [[ -f "$dir/metrics.json" ]] && grep -q '"status": "finished"' "$dir/metrics.json"; then
        echo "skip $dir (finished)"; return
    fi
    echo "$(date -Is) start $1 seed=$2 loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/runs.log"
    local t0=$SECONDS
    "$PY" train.py experiment="$1" seed="$2" logger=csv hydra.run.dir="$dir" > "$dir.out" 2>&1 || \
        echo "$(date -Is) FAILED $1 seed=$2 (see $dir.out)" | tee -a "$OUT/runs.log"
    echo "$(date -Is) end $1 seed=$2 wall_s=$((SECONDS - t0)) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" \
        | tee -a "$OUT/runs.log"
}

for part in $PARTS; do
    case $part in
        m1) run funnel_wiki_b1_1_1_mlm_mini 0 ;;
        pair|midi) size=$([[ $part == pair ]] && echo mini || echo midi)
                   for seed in 0 1 2; do
                       run "funnel_wiki_b3_3_3_mlm_$size" "$seed"
                       run "funnel_wiki_l7_mlm_$size" "$seed"
                   done ;;
        *) echo "unknown part $part (m1 | pair | midi)"; exit 2 ;;
    esac
done
