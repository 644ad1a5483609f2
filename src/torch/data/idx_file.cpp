#include "data/idx_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "ddp/error.h"

namespace ddp::detail {
namespace {

constexpr std::uint64_t kMaxDataBytes = std::uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

class Reader {
 public:
  Reader(const std::string& path, const std::string& context) : path_(path), context_(context) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      fail(std::string("cannot open it: ") + (errno ? std::strerror(errno) : "out of memory"));
    }
    gzbuffer(file_.get(), 1 << 18);
  }

  // Reads up to `n` bytes into `out`; returns how many were read (fewer only at the end).
  std::size_t read(void* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(file_.get(), static_cast<char*>(out) + done, chunk);
      if (got < 0) fail_zlib();
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }

  // After a short read: a gzip stream that ended early or is corrupt says so itself.
  void check_stream() {
    int code = Z_OK;
    gzerror(file_.get(), &code);
    if (code != Z_OK) fail_zlib();
  }

  [[noreturn]] void fail(const std::string& what) const { throw IOError(context_ + ": " + path_ + ": " + what); }

 private:
  [[noreturn]] void fail_zlib() {
    int code = Z_OK;
    const char* raw = gzerror(file_.get(), &code);
    std::string message = raw && *raw ? raw : "error";
    if (message.rfind(path_ + ": ", 0) == 0) message.erase(0, path_.size() + 2);  // zlib prefixes the path
    fail("cannot be decompressed (zlib: " + message +
         "): the file is corrupt or truncated; reinstall or re-download it");
  }

  std::string path_;
  std::string context_;
  GzPtr file_;
};

std::uint32_t big_endian(const unsigned char* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

}  // namespace

IdxArray read_idx_ubyte(const std::string& path, std::uint32_t magic, const std::string& context) {
  Reader reader(path, context);
  const int ndims = static_cast<int>(magic & 0xff);
  const char* kind = magic == kIdxImagesMagic ? "image" : "label";

  unsigned char head[4];
  std::size_t got = reader.read(head, sizeof head);
  if (got < sizeof head) {
    reader.check_stream();
    reader.fail("only " + std::to_string(got) + " bytes: too short for an IDX header (truncated or empty file)");
  }
  const std::uint32_t found = big_endian(head);
  if (found != magic) {
    reader.fail("not an IDX " + std::string(kind) + " file: magic number " + std::to_string(found) + ", expected " +
                std::to_string(magic) + " (the file is corrupt, or not what its name says)");
  }

  IdxArray array;
  std::uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    got = reader.read(head, sizeof head);
    if (got < sizeof head) {
      reader.check_stream();
      reader.fail("truncated inside its header (dimension " + std::to_string(d) + " of " + std::to_string(ndims) + ")");
    }
    const std::uint32_t dim = big_endian(head);
    array.dims.push_back(dim);
    total *= dim;
    if (total > kMaxDataBytes) {
      reader.fail("its header announces more than 4 GiB of data: the header is corrupt");
    }
  }

  std::string shape;
  for (std::size_t d = 0; d < array.dims.size(); ++d) shape += (d ? " x " : "") + std::to_string(array.dims[d]);
  const auto expected = static_cast<std::size_t>(total);
  // Grow while reading, so that a corrupt header cannot make us allocate what is not there.
  std::size_t have = 0;
  while (have < expected) {
    const std::size_t step = std::min<std::size_t>(expected - have, std::size_t{1} << 24);
    array.data.resize(have + step);
    const std::size_t n = reader.read(array.data.data() + have, step);
    have += n;
    if (n < step) break;
  }
  if (have < expected) {
    array.data.resize(have);
    reader.check_stream();
    reader.fail("truncated: its header announces " + shape + " bytes of " + kind + " data (" +
                std::to_string(expected) + " bytes) but it holds only " + std::to_string(have));
  }
  unsigned char extra;
  if (reader.read(&extra, 1) != 0) {
    reader.fail("longer than its header announces (" + shape + " = " + std::to_string(expected) +
                " bytes of data): the file is corrupt");
  }
  reader.check_stream();
  return array;
}

}  // namespace ddp::detail
