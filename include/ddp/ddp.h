// Everything ddp offers a LibTorch program: the core (process groups, stores, the process-wide
// API) and the LibTorch front (tensor collectives, DistributedDataParallel, DistributedSampler,
// datasets, checkpoints).
#pragma once

#include "ddp/core.h"
#include "ddp/torch.h"
