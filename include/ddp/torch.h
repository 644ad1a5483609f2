// ddp's LibTorch front: tensor collectives, DistributedDataParallel and its communication hooks,
// join (uneven inputs), SyncBatchNorm, DistributedSampler, the datasets and checkpoints.
#pragma once

#include "ddp/torch/checkpoint.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/data/fashion_mnist.h"
#include "ddp/torch/data/synthetic.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "ddp/torch/distributed_sampler.h"
#include "ddp/torch/future.h"
#include "ddp/torch/join.h"
#include "ddp/torch/sync_batch_norm.h"
