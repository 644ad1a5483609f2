// How often each parameter's gradient arrives in one backward pass, against how often it should:
// once, or with static_graph as often as in the first synchronized backward (a parameter used in
// several re-entrant backward passes, activation checkpointing's, arrives several times). Pure:
// no tensors, no threads.
#pragma once

#include <cstddef>
#include <vector>

namespace ddp::detail {

class Arrivals {
 public:
  Arrivals(std::size_t num_params, bool static_graph);

  // A new backward pass: nothing has arrived.
  void reset();

  enum class Verdict {
    Counted,  // static_graph's first backward: counted only (the counts are not known yet)
    Waiting,  // more arrivals are expected in this backward
    Ready,    // the last expected arrival: the gradient is complete
    TooMany,  // more than expected: the graph is not what it was (or not static)
  };
  Verdict arrive(std::size_t param);

  // static_graph before the counts are known: the first synchronized backward counts them.
  bool learning() const { return learning_; }
  // From now on `counts[p]` arrivals complete parameter p (0: unused, complete at once).
  void learn(std::vector<int> counts);

  int arrived(std::size_t param) const { return arrived_[param]; }
  int expected(std::size_t param) const { return expected_[param]; }
  const std::vector<int>& arrived() const { return arrived_; }
  // The parameters in the order of their first arrival in this backward.
  const std::vector<std::size_t>& first_arrivals() const { return order_; }
  // Known counts: the parameters expected never to arrive (static_graph's unused ones).
  std::vector<std::size_t> never_expected() const;
  // Known counts: the parameters that arrived fewer times than expected in this backward.
  std::vector<std::size_t> short_of_expected() const;

 private:
  bool learning_;
  std::vector<int> expected_;
  std::vector<int> arrived_;
  std::vector<std::size_t> order_;
};

}  // namespace ddp::detail
