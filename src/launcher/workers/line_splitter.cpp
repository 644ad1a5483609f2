#include "workers/line_splitter.h"

namespace ddp::launcher {

void LineSplitter::feed(std::string_view bytes, const Emit& emit) {
  if (carriage_return_) return feed_terminal(bytes, emit);
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    const std::size_t take = newline == std::string_view::npos ? bytes.size() : newline;
    if (partial_.empty() && newline != std::string_view::npos && take <= max_line_) {
      emit(bytes.substr(0, take));  // the common case: a whole line, no copy
      bytes.remove_prefix(take + 1);
      continue;
    }
    const std::size_t room = max_line_ - partial_.size();
    if (take > room) {  // too long: emit a full piece, the rest of the line follows
      partial_.append(bytes.substr(0, room));
      bytes.remove_prefix(room);
      emit(partial_);
      partial_.clear();
      continue;
    }
    partial_.append(bytes.substr(0, take));
    if (newline == std::string_view::npos) return;
    bytes.remove_prefix(take + 1);
    emit(partial_);
    partial_.clear();
  }
}

void LineSplitter::feed_terminal(std::string_view bytes, const Emit& emit) {
  for (char c : bytes) {
    if (after_cr_ && c != '\n') partial_.clear();  // the line starts over
    after_cr_ = c == '\r';
    if (c == '\n') {
      emit(partial_);
      partial_.clear();
    } else if (c != '\r') {
      partial_ += c;
      if (partial_.size() >= max_line_) {
        emit(partial_);
        partial_.clear();
      }
    }
  }
}

void LineSplitter::finish(const Emit& emit) {
  after_cr_ = false;
  if (partial_.empty()) return;
  emit(partial_);
  partial_.clear();
}

}  // namespace ddp::launcher
