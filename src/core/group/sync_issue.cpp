#include "group/sync_issue.h"

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp {
namespace detail {
namespace {
thread_local SyncIssue* t_armed = nullptr;
}

SyncIssue::SyncIssue() : previous_(t_armed) { t_armed = this; }

SyncIssue::~SyncIssue() {
  t_armed = previous_;
  if (worker_) worker_->wake();
}

SyncIssue* SyncIssue::claim() {
  SyncIssue* scope = t_armed;
  if (!scope || !scope->armed_) return nullptr;
  scope->armed_ = false;
  return scope;
}

void SyncIssue::posted(std::shared_ptr<Worker> worker, std::uint64_t ticket) {
  worker_ = std::move(worker);
  ticket_ = ticket;
}

void SyncIssue::run() {
  armed_ = false;
  if (!worker_) return;
  auto worker = std::move(worker_);
  if (!worker->run_here(ticket_)) worker->wake();
}

}  // namespace detail

void issue_and_wait(const std::function<std::shared_ptr<Work>()>& issue) {
  detail::SyncIssue sync;
  auto work = issue();
  sync.run();
  if (!work) throw InvalidArgument("issue_and_wait: the issuing function returned no Work");
  work->wait();
}

}  // namespace ddp
