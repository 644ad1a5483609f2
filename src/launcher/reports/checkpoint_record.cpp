#include "reports/checkpoint_record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ddp/error.h"
#include "net/socket.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

constexpr std::size_t kMaxRecordBytes = 64 * 1024;  // a record is two short lines

}  // namespace

CheckpointRecord parse_checkpoint_record(std::string_view text) {
  CheckpointRecord record;
  bool have_step = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "step") {
      auto step = detail::parse_int(value);
      if (!step || *step < 0) throw Error(cat("step=", detail::quote(value), " is not a step number (0 or more)"));
      record.step = *step;
      have_step = true;
    } else if (key == "path") {
      record.path = std::string(value);
    }
  }
  if (!have_step) throw Error(cat("it holds no step=N line: ", detail::quote(text, 120)));
  return record;
}

CheckpointRecords::CheckpointRecords() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = cat(tmp && *tmp ? tmp : "/tmp", "/ddprun-checkpoints-XXXXXX");
  if (!::mkdtemp(pattern.data())) {
    throw IOError(cat("cannot create a folder for the workers' checkpoint records (", pattern,
                      "): ", std::strerror(errno), ". Set TMPDIR to a folder ddprun may write to."));
  }
  folder_ = pattern;
}

CheckpointRecords::~CheckpointRecords() {
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

std::string CheckpointRecords::path_for(int rank) const { return cat(folder_, "/rank_", rank); }

std::optional<CheckpointRecord> CheckpointRecords::latest(const std::vector<int>& ranks,
                                                          std::vector<std::string>& problems) const {
  std::optional<CheckpointRecord> newest;
  for (int rank : ranks) {
    const std::string path = path_for(rank);
    detail::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      if (errno != ENOENT)
        problems.push_back(cat("cannot read rank ", rank, "'s checkpoint record ", path, ": ", std::strerror(errno)));
      continue;
    }
    std::string text(kMaxRecordBytes + 1, '\0');
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    try {
      if (got > kMaxRecordBytes) throw Error(cat("it is larger than ", kMaxRecordBytes / 1024, " KiB"));
      CheckpointRecord record = parse_checkpoint_record(text);
      record.rank = rank;
      if (!newest || record.step > newest->step) newest = std::move(record);
    } catch (const Error& e) {
      problems.push_back(cat("rank ", rank, "'s checkpoint record ", path, " is unreadable: ", e.what()));
    }
  }
  return newest;
}

}  // namespace ddp::launcher

namespace ddp::launcher {

std::string CheckpointRecords::straggler_path() const { return cat(folder_, "/straggler_report"); }

std::string CheckpointRecords::last_straggler_report() const {
  std::ifstream in(straggler_path());
  std::string line;
  std::getline(in, line);
  return line.size() > kMaxRecordBytes ? line.substr(0, kMaxRecordBytes) : line;
}

}  // namespace ddp::launcher
