// torch.distributed's collectives on torch::Tensor, over ddp process groups.
//
//   ddp::all_reduce(grad);                          // in place, SUM over the default group
//   auto work = ddp::all_reduce_async(t, ddp::ReduceOp::AVG, group);
//   ...; work->wait();
//
// Tensors must be contiguous, of a supported dtype (float32, float64, float16, bfloat16, int8,
// uint8, int32, int64), on the CPU or a CUDA device. Lists must hold tensors of one dtype, device
// and size. Violations throw ddp::InvalidArgument before anything is sent. `group` null means the
// default group. An async form keeps its tensors alive until its Work completes; read the
// results only after wait(). Its `launch` is ProcessGroup's (ddp/process_group.h): Launch::OnWait
// when the caller waits at once, which is how the blocking forms run their op on this thread.
//
// CUDA tensors (docs/NCCL.md). On nccl they must be on this rank's GPU; the op runs on nccl's
// stream after the work queued on the current stream when it was issued, and completes when the
// GPU work is done. Copies that follow it (into the tensors of a list, or back from host memory)
// are queued on the stream that was current at issue: after wait(), use the results on that
// stream (as PyTorch's Work::wait() promises for the current stream), or synchronize it. On gloo
// CUDA tensors are staged through host memory (copied to the host as the op is issued): slower,
// but it lets several ranks share one GPU.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <vector>

#include "ddp/distributed.h"
#include "ddp/process_group.h"
#include "ddp/types.h"
#include "ddp/work.h"

namespace ddp {

using GroupPtr = std::shared_ptr<ProcessGroup>;

// Every rank ends with the reduction of every rank's `tensor`.
void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr);
std::shared_ptr<Work> all_reduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr,
                                       Launch launch = Launch::Async);

// Every rank ends with rank `src`'s `tensor`.
void broadcast(at::Tensor& tensor, int src, const GroupPtr& group = nullptr);
std::shared_ptr<Work> broadcast_async(at::Tensor& tensor, int src, const GroupPtr& group = nullptr,
                                      Launch launch = Launch::Async);

// Rank `dst` ends with the reduction; the others' tensors are unchanged.
void reduce(at::Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr);
std::shared_ptr<Work> reduce_async(at::Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM,
                                   const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// outputs[r] receives rank r's `tensor`; `outputs` holds world-size tensors shaped like `tensor`.
void all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& tensor, const GroupPtr& group = nullptr);
std::shared_ptr<Work> all_gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& tensor,
                                       const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// `output` (world size x input's elements, e.g. shape [world * n, ...]) receives every rank's
// input, in rank order.
void all_gather_into_tensor(at::Tensor& output, const at::Tensor& input, const GroupPtr& group = nullptr);
std::shared_ptr<Work> all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& input,
                                                   const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// `output` receives the reduction over ranks of inputs[rank]; `inputs` holds world-size tensors
// shaped like `output`.
void reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op = ReduceOp::SUM,
                    const GroupPtr& group = nullptr);
std::shared_ptr<Work> reduce_scatter_async(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                           ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr,
                                           Launch launch = Launch::Async);

// As reduce_scatter with the inputs concatenated in one tensor of world size x output's elements.
void reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op = ReduceOp::SUM,
                           const GroupPtr& group = nullptr);
std::shared_ptr<Work> reduce_scatter_tensor_async(at::Tensor& output, const at::Tensor& input,
                                                  ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr,
                                                  Launch launch = Launch::Async);

// outputs[r] receives inputs[rank] of rank r. Both lists hold world-size tensors of one size.
void all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const GroupPtr& group = nullptr);
std::shared_ptr<Work> all_to_all_async(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                       const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// As all_to_all with equal chunks of single tensors (element count divisible by the world size).
void all_to_all_single(at::Tensor& output, const at::Tensor& input, const GroupPtr& group = nullptr);
std::shared_ptr<Work> all_to_all_single_async(at::Tensor& output, const at::Tensor& input,
                                              const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// Rank `dst`'s gather_list[r] receives rank r's `tensor`; other ranks pass an empty list.
void gather(const at::Tensor& tensor, std::vector<at::Tensor>& gather_list, int dst = 0,
            const GroupPtr& group = nullptr);
std::shared_ptr<Work> gather_async(const at::Tensor& tensor, std::vector<at::Tensor>& gather_list, int dst = 0,
                                   const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// Rank r's `tensor` receives rank `src`'s scatter_list[r]; other ranks pass an empty list.
void scatter(at::Tensor& tensor, const std::vector<at::Tensor>& scatter_list, int src = 0,
             const GroupPtr& group = nullptr);
std::shared_ptr<Work> scatter_async(at::Tensor& tensor, const std::vector<at::Tensor>& scatter_list, int src = 0,
                                    const GroupPtr& group = nullptr, Launch launch = Launch::Async);

// Point to point; a send and a recv with the same peer and tag match in issue order.
void send(const at::Tensor& tensor, int dst, const GroupPtr& group = nullptr, int tag = 0);
std::shared_ptr<Work> isend(const at::Tensor& tensor, int dst, const GroupPtr& group = nullptr, int tag = 0);
void recv(at::Tensor& tensor, int src, const GroupPtr& group = nullptr, int tag = 0);
std::shared_ptr<Work> irecv(at::Tensor& tensor, int src, const GroupPtr& group = nullptr, int tag = 0);

// Where small tensors for a collective on `group` belong (metrics, counts, flags): the CPU when the
// group takes CPU tensors (gloo, "cpu:gloo,cuda:nccl"), else this rank's GPU, the one LOCAL_RANK
// names (nccl alone). ddp's own collectives (the straggler report, ZeroRedundancyOptimizer's state,
// ...) put their tensors there, so they work on every backend.
c10::Device collective_device(const GroupPtr& group = nullptr);

// The ddp element type of a torch dtype; throws InvalidArgument for unsupported dtypes.
DataType to_data_type(at::ScalarType type);

// A Buffer over a contiguous tensor's storage; `what` names the tensor in errors.
Buffer to_buffer(const at::Tensor& tensor, const char* what = "tensor");

}  // namespace ddp
