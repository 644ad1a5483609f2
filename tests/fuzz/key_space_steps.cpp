// The fuzzer's key-space mode: ddp requests from the input, as up to eight clients send them,
// applied to the server's KeySpace as its protocol handler applies them, with a model of who
// waits and who watches beside it. After every step the key space must agree with the model:
// answers go only to parked clients, with keys that exist and the values they hold; no parked
// wait has all its keys; watchers hear of a change once, with the value before it; the earliest
// deadline is the model's. Time is virtual: hello advances it and expires what is due.
#include "key_space_steps.h"

#include <algorithm>
#include <map>
#include <set>

#include "ddp/error.h"
#include "store/key_space.h"
#include "store/wire.h"

namespace ddp::fuzz {
namespace {

using detail::KeySpace;
namespace wire = detail::wire;
using Clock = KeySpace::Clock;

#define CHECK(condition) \
  if (!(condition)) __builtin_trap()

class Steps {
 public:
  void run(std::string_view stream) {
    while (stream.size() > 1) {
      const auto client = static_cast<KeySpace::ClientId>(stream[0] & 7);
      stream.remove_prefix(1);
      wire::Request q;
      std::size_t consumed = 0;
      std::string error;
      if (wire::parse(stream, q, consumed, error) != wire::Parse::Complete) return;
      stream.remove_prefix(consumed);
      step(client, q);
      check_parked();
    }
  }

 private:
  struct Waiting {
    KeySpace::Want want;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void step(KeySpace::ClientId client, const wire::Request& q) {
    // A parked client's requests wait unread, but for these two (as CANCEL_WAIT and a close).
    if (parked_.count(client) && q.op != wire::Op::Ping && q.op != wire::Op::Bye) return;
    switch (q.op) {
      case wire::Op::Set: changed(q.key, [&] { return keys_.set(q.key, q.value); }); break;
      case wire::Op::Get: wait(client, KeySpace::Want::Value, {q.key}, q.number); break;
      case wire::Op::Wait: wait(client, KeySpace::Want::Keys, q.keys, q.number); break;
      case wire::Op::MultiGet: wait(client, KeySpace::Want::Values, q.keys, q.number); break;
      case wire::Op::Add:
        changed(q.key, [&] {
          try {
            return keys_.add(q.key, q.number).effects;
          } catch (const InvalidArgument&) {
            return KeySpace::Effects{};
          }
        });
        break;
      case wire::Op::CompareSet:
        changed(q.key, [&] {
          auto [value, effects] = keys_.compare_set(q.key, q.value, q.value2);
          const std::string* now = keys_.find(q.key);
          CHECK(now ? value == *now : value == q.value);  // what the key holds afterwards, or `expected`
          return std::move(effects);
        });
        break;
      case wire::Op::Check:  // and watch the keys, so that watchers are fuzzed too
        for (const auto& key : q.keys) {
          keys_.watch(client, key);
          watchers_[key].insert(client);
        }
        (void)keys_.contains_all(q.keys);
        break;
      case wire::Op::Delete: {
        const bool existed = keys_.find(q.key) != nullptr;
        changed(q.key, [&] {
          auto [erased, effects] = keys_.erase(q.key);
          CHECK(erased == existed && keys_.find(q.key) == nullptr && effects.answers.empty());
          return std::move(effects);
        });
        break;
      }
      case wire::Op::NumKeys: break;
      case wire::Op::Hello:  // time passes
        now_ += std::chrono::milliseconds(std::clamp<std::int64_t>(q.number, 0, 1'000'000));
        expire();
        break;
      case wire::Op::Bye:  // the client goes away
        keys_.drop(client);
        parked_.erase(client);
        for (auto& [key, who] : watchers_) who.erase(client);
        break;
      case wire::Op::Ping:  // CANCEL_WAIT
        CHECK(keys_.cancel_wait(client) == (parked_.erase(client) > 0));
        break;
    }
  }

  // Runs one change of `key` and checks its effects.
  template <typename Change>
  void changed(const std::string& key, Change&& change) {
    const std::string* value = keys_.find(key);
    const std::optional<std::string> before = value ? std::optional<std::string>(*value) : std::nullopt;
    const KeySpace::Effects effects = change();
    const std::string* after = keys_.find(key);
    const auto& watching = watchers_[key];
    if (effects.notice) {
      const auto& n = *effects.notice;
      CHECK(n.key == key && n.old_value == before.value_or("") && n.new_value == (after ? *after : ""));
      CHECK(n.change == (!after   ? KeySpace::Change::Deleted
                         : before ? KeySpace::Change::Updated
                                  : KeySpace::Change::Created));
      CHECK(std::vector<KeySpace::ClientId>(watching.begin(), watching.end()) == n.watchers);
    } else {
      // Unwatched, or nothing changed.
      CHECK(watching.empty() || (before.has_value() == (after != nullptr) && (!after || *after == *before)));
    }
    for (const auto& a : effects.answers) answered(a);
  }

  void wait(KeySpace::ClientId client, KeySpace::Want want, std::vector<std::string> keys, std::int64_t timeout_ms) {
    const auto deadline = timeout_ms < 0
                              ? KeySpace::kNoDeadline  // as a PyTorch wait
                              : now_ + std::chrono::milliseconds(std::min<std::int64_t>(timeout_ms, 1'000'000));
    auto now = keys_.wait(client, want, keys, deadline);
    parked_[client] = {want, std::move(keys), deadline};
    if (now) {
      answered(*now);
    } else {
      CHECK(keys_.is_parked(client));
    }
  }

  // An answer to a wait whose keys all exist.
  void answered(const KeySpace::Answer& a) {
    auto it = parked_.find(a.client);
    CHECK(it != parked_.end() && a.want == it->second.want && a.missing.empty());
    CHECK(keys_.contains_all(it->second.keys) && !keys_.is_parked(a.client));
    if (a.want == KeySpace::Want::Value) CHECK(a.value == *keys_.find(it->second.keys.front()));
    if (a.want == KeySpace::Want::Values) {
      CHECK(a.values.size() == it->second.keys.size());
      for (std::size_t i = 0; i < a.values.size(); ++i) CHECK(a.values[i] == *keys_.find(it->second.keys[i]));
    }
    parked_.erase(it);
  }

  void expire() {
    for (const auto& a : keys_.expire(now_)) {
      auto it = parked_.find(a.client);
      CHECK(it != parked_.end() && it->second.deadline <= now_ && !a.missing.empty());
      for (const auto& key : a.missing) CHECK(!keys_.find(key));
      parked_.erase(it);
    }
  }

  void check_parked() {
    auto earliest = KeySpace::kNoDeadline;
    for (const auto& [client, waiting] : parked_) {
      CHECK(keys_.is_parked(client) && !keys_.contains_all(waiting.keys));
      earliest = std::min(earliest, waiting.deadline);
    }
    CHECK(keys_.next_deadline() == earliest);
  }

  KeySpace keys_;
  Clock::time_point now_{};
  std::map<KeySpace::ClientId, Waiting> parked_;
  std::map<std::string, std::set<KeySpace::ClientId>> watchers_;
};

}  // namespace

void key_space_steps(std::string_view stream) { Steps().run(stream); }

}  // namespace ddp::fuzz
