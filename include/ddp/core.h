// Everything in ddp's core: stores, process groups, backends and the process-wide API.
// No LibTorch header is needed (see ddp/ddp.h for the LibTorch front).
#pragma once

#include "ddp/backend.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/file_store.h"
#include "ddp/flight_recorder.h"
#include "ddp/hash_store.h"
#include "ddp/prefix_store.h"
#include "ddp/process_group.h"
#include "ddp/store.h"
#include "ddp/tcp_store.h"
#include "ddp/types.h"
#include "ddp/work.h"
