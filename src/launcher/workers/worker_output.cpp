#include "workers/worker_output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

void write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;
    }
  }
}

void make_directories(const std::string& path) {
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IOError(cat("cannot create the folder ", partial, ": ", std::strerror(errno),
                        ". Check --log_dir (it must be a folder ddprun may write to)."));
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw IOError(cat(path, " is not a folder. Check --log_dir."));
  }
}

WorkerOutput::WorkerOutput(WorkerOutputOptions options)
    : options_(std::move(options)),
      console_(options_.screen ? options_.screen : &own_console_),
      splitter_{LineSplitter(64 * 1024, options_.live_stdout), LineSplitter()} {
  prefix_ = cat("[", options_.rank, "]:");
  if (!options_.log_path.empty()) {
    const auto slash = options_.log_path.rfind('/');
    if (slash != std::string::npos && slash > 0) make_directories(options_.log_path.substr(0, slash));
    log_ = detail::Fd(::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644));
    if (!log_) {
      throw IOError(
          cat("cannot create the log file ", options_.log_path, ": ", std::strerror(errno), ". Check --log_dir."));
    }
  }
}

void WorkerOutput::on_data(Stream stream, std::string_view bytes) {
  const int index = static_cast<int>(stream);
  splitter_[index].feed(bytes, [&](std::string_view line) { on_line(stream, line); });
  if (stream == Stream::Out && options_.live_stdout && options_.console[index] && splitter_[index].pending() > 0) {
    scratch_.assign(prefix_);
    scratch_.append(splitter_[index].partial());
    console_->live(options_.console_fd[index], scratch_);
  }
}

void WorkerOutput::on_eof(Stream stream) {
  splitter_[static_cast<int>(stream)].finish([&](std::string_view line) { on_line(stream, line); });
}

void WorkerOutput::on_line(Stream stream, std::string_view line) {
  const int index = static_cast<int>(stream);
  if (options_.console[index]) {
    scratch_.assign(prefix_);
    scratch_.append(line);
    if (stream == Stream::Out && options_.live_stdout) {
      console_->end_live(options_.console_fd[index], scratch_);
    } else {
      console_->line(options_.console_fd[index], scratch_);
    }
  }
  if (log_) {
    scratch_.assign(line);
    scratch_.push_back('\n');
    write_fully(log_.get(), scratch_);
  }
  if (options_.tail_lines > 0) {
    if (tail_.size() == options_.tail_lines) tail_.pop_front();
    std::string kept(line.substr(0, options_.tail_line_bytes));
    if (line.size() > options_.tail_line_bytes) kept += cat("... (", line.size(), " bytes)");
    tail_.push_back(std::move(kept));
  }
  if (options_.keep && options_.kept_lines > 0 && options_.keep(line)) {
    if (kept_.size() == options_.kept_lines) kept_.pop_front();
    kept_.emplace_back(line.substr(0, options_.kept_line_bytes));
  }
}

}  // namespace ddp::launcher
