// ddp's LibTorch front.
#pragma once

#include "ddp/torch/collectives.h"
#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "ddp/torch/future.h"
