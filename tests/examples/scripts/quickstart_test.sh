#!/usr/bin/env bash
# scripts/quickstart.sh on a small subset: it prints the ddprun command it runs; run again, it
# resumes the last unfinished run (and says so) with that run's arguments; a finished run, other
# trainer arguments or --fresh start a new run.
#   quickstart_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/checks.sh"
quickstart="$1/scripts/quickstart.sh"
export DDP_BUILD_DIR="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export DDP_RUNS_DIR="$tmp/runs"
small=(--epochs 2 --limit-train 512 --limit-test 200 --log-every 2)  # 4 steps per epoch
tiny=(--epochs 1 --limit-train 256 --limit-test 100)

runs() { ls -d "$DDP_RUNS_DIR"/fashion_mnist-* 2>/dev/null | sort; }

# 1. A new run, stopped in its second epoch: the command is printed as it is run.
out="$("$quickstart" "${small[@]}" --stop-after 5 2>&1)"
expect_eq "$?" 0 "exit status of the first run"
run="$(runs | tail -n 1)"
[ -n "$run" ] || fail "no run directory in $DDP_RUNS_DIR"
expect_contains "$out" "== a new run: checkpoints, metrics.csv and metrics.svg go to $run"
expect_contains "$out" "== $DDP_BUILD_DIR/src/launcher/ddprun --nproc_per_node=2 $DDP_BUILD_DIR/examples/train_fashion_mnist --checkpoint-dir $run --epochs 2 --limit-train 512 --limit-test 200 --log-every 2 --stop-after 5"
expect_contains "$out" "stopping after step 5"

# 2. Run again without arguments: the same run resumes with its own arguments and finishes.
out="$("$quickstart" 2>&1)"
expect_eq "$?" 0 "exit status of the resumed run"
expect_eq "$(runs | wc -l)" 1 "runs after resuming"
expect_contains "$out" "== resuming the unfinished run in $run (epoch 2 of 2; scripts/quickstart.sh --fresh starts a new run)"
expect_contains "$out" "--checkpoint-dir $run --epochs 2 --limit-train 512" "the resumed command"
expect_contains "$out" "resumed from $run/checkpoint-000000000005.ckpt: epoch 2, step 5"
expect_contains "$out" "done: test accuracy"
expect_eq "$(wc -l <"$run/metrics.csv")" 3 "metrics.csv lines of the finished run"

# 3. The last run has finished: a new one.
out="$("$quickstart" "${tiny[@]}" 2>&1)"
expect_eq "$?" 0 "exit status of the run after a finished one"
expect_contains "$out" "== the last run, $run, has finished: starting a new run"
expect_eq "$(runs | wc -l)" 2 "runs after a finished one"

# 4. An unfinished run and --fresh: a new one all the same.
"$quickstart" "${small[@]}" --stop-after 1 >/dev/null 2>&1 || fail "the run to be left unfinished failed"
unfinished="$(runs | tail -n 1)"
out="$("$quickstart" --fresh "${small[@]}" --stop-after 1 2>&1)"
expect_eq "$?" 0 "exit status of --fresh"
expect_not_contains "$out" "resuming"
expect_eq "$(runs | wc -l)" 4 "runs after --fresh"
expect_not_contains "$out" "--fresh" "the trainer's arguments"

# 5. An unfinished run, other trainer arguments: a new run, and why.
out="$("$quickstart" "${tiny[@]}" 2>&1)"
expect_eq "$?" 0 "exit status of a run with other arguments"
expect_contains "$out" "was started with other trainer arguments (--epochs 2 --limit-train 512 --limit-test 200 --log-every 2 --stop-after 1): starting a new run"
expect_eq "$(runs | wc -l)" 5 "runs after other arguments"
[ -d "$unfinished" ] || fail "the unfinished run went away"

finish
