#!/usr/bin/env bash
# Installs what is missing, builds ddprun and the example (only those: scripts/test.sh builds the
# rest), and trains a CNN on Fashion-MNIST with 2 processes under ddprun (about 2 minutes of
# training on 2 CPU cores), printing the command it runs. Run again, it resumes the last run if
# that one did not finish (stopped with Ctrl-C, killed); --fresh starts a new one. Other
# arguments go to the trainer (build/examples/train_fashion_mnist --help lists them):
#   scripts/quickstart.sh [--fresh] [--epochs 5 ...]
# DDP_BUILD_DIR (default build) and DDP_RUNS_DIR (default runs) say where the build and the runs go.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${DDP_BUILD_DIR:-build}"
runs="${DDP_RUNS_DIR:-runs}"

fresh=0
args=()
for a in "$@"; do
  if [ "$a" = --fresh ]; then fresh=1; else args+=("$a"); fi
done

scripts/setup.sh --target ddprun --target train_fashion_mnist "$build"

# The epochs a run was asked for: the last --epochs, or the trainer's default (3).
epochs_of() {
  local epochs=3 previous=""
  for a in "$@"; do
    case "$previous" in --epochs) epochs="$a" ;; esac
    case "$a" in --epochs=*) epochs="${a#--epochs=}" ;; esac
    previous="$a"
  done
  echo "$epochs"
}

# The newest run, resumed when it has a checkpoint and fewer epochs in metrics.csv than it was
# asked for, and when this call asks for nothing else (no trainer arguments, or the same ones).
run=""
last="$(ls -d "$runs"/fashion_mnist-* 2>/dev/null | sort | tail -n 1 || true)"
if ((!fresh)) && [ -n "$last" ] && [ -f "$last/quickstart.args" ]; then
  saved=()
  mapfile -d '' saved <"$last/quickstart.args"
  done_epochs=0
  [ -f "$last/metrics.csv" ] && done_epochs=$(($(wc -l <"$last/metrics.csv") - 1))
  if ! ls "$last"/checkpoint-*.ckpt >/dev/null 2>&1; then
    echo "== the last run, $last, has no checkpoint to resume from: starting a new run"
  elif ((done_epochs >= $(epochs_of "${saved[@]}"))); then
    echo "== the last run, $last, has finished: starting a new run"
  elif ((${#args[@]})) && [ "${args[*]@Q}" != "${saved[*]@Q}" ]; then
    echo "== the last run, $last, was started with other trainer arguments (${saved[*]}): starting a new run"
  else
    run="$last"
    args=("${saved[@]}")
    echo "== resuming the unfinished run in $run (epoch $((done_epochs + 1)) of $(epochs_of "${saved[@]}");" \
         "scripts/quickstart.sh --fresh starts a new run)"
  fi
fi
if [ -z "$run" ]; then
  run="$runs/fashion_mnist-$(date +%Y%m%d-%H%M%S)"
  n=1
  while [ -e "$run" ]; do run="$runs/fashion_mnist-$(date +%Y%m%d-%H%M%S)-$((++n))"; done
  mkdir -p "$run"
  : >"$run/quickstart.args"  # the trainer arguments, NUL-separated, for a rerun to resume with
  ((${#args[@]} == 0)) || printf '%s\0' "${args[@]}" >"$run/quickstart.args"
  echo "== a new run: checkpoints, metrics.csv and metrics.svg go to $run"
fi

command=("$build/src/launcher/ddprun" --nproc_per_node=2 "$build/examples/train_fashion_mnist" --checkpoint-dir "$run"
         "${args[@]}")
printf -v shown '%q ' "${command[@]}"
echo "== ${shown% }"
echo "== (Ctrl-C stops it with a checkpoint; this command, or scripts/quickstart.sh, resumes it)"
exec "${command[@]}"
