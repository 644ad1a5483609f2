// ddp's LibTorch front.
#pragma once

#include "ddp/torch/collectives.h"
