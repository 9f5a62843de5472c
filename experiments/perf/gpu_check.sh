#!/usr/bin/env bash
# One command before a long GPU run: every family's bf16-mixed training steps on the device (fused attention,
# torch.compile), tokens/s and MFU, the losses against fp32 on the CPU, one FSDP2 step. Exit 0 = all passed.
#   experiments/perf/gpu_check.sh          # one CUDA device, under 10 minutes on one H100
#   experiments/perf/gpu_check.sh --cpu    # the dry run on the CPU (mini presets; CI runs it)
# Extra arguments go to gpu_check.py (--families, --steps, --no-compile ...; see --help).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GENLAB_OFFLINE="${GENLAB_OFFLINE:-1}" WANDB_MODE="${WANDB_MODE:-disabled}"
exec timeout "${GPU_CHECK_TIMEOUT:-600}" "${PYTHON:-python}" experiments/perf/gpu_check.py "$@"
