// ddp's LibTorch front: tensor collectives, DistributedDataParallel and its communication hooks,
// DistributedSampler, the datasets, checkpoints, weight files shared with Python, mixed precision
// (Autocast, GradScaler), PowerSGD, ZeroRedundancyOptimizer, join (uneven inputs) and SyncBatchNorm.
#pragma once

#include "ddp/torch/amp.h"
#include "ddp/torch/checkpoint.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/data/fashion_mnist.h"
#include "ddp/torch/data/synthetic.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "ddp/torch/distributed_sampler.h"
#include "ddp/torch/future.h"
#include "ddp/torch/join.h"
#include "ddp/torch/powersgd.h"
#include "ddp/torch/state_dict.h"
#include "ddp/torch/sync_batch_norm.h"
#include "ddp/torch/zero_redundancy_optimizer.h"
