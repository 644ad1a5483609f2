#!/usr/bin/env bash
# Installs what is missing, builds, and trains a CNN on Fashion-MNIST with 2 processes under
# ddprun (about 2 minutes of training on 2 CPU cores). Extra arguments go to the trainer, e.g.
#   scripts/quickstart.sh --epochs 5
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
run="runs/fashion_mnist-$(date +%Y%m%d-%H%M%S)"
echo "== training; checkpoints, metrics.csv and metrics.svg go to $run"
exec build/src/launcher/ddprun --nproc_per_node=2 build/examples/train_fashion_mnist --epochs 3 \
  --checkpoint-dir "$run" "$@"
