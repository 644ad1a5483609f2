// Zip archives in memory, through libzip: the container of torch.save's format. Reading is
// bounded by the archive's bytes: an entry is read only whole, checked against its size and
// CRC-32, and one that claims more than its compressed bytes can hold is refused before any
// memory is set aside for it. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct zip;

namespace ddp::detail::weights {

class ZipReader {
 public:
  // Opens the archive held in `bytes`, which must outlive the reader. Throws IOError when it is
  // not a zip archive, or a truncated or inconsistent one.
  explicit ZipReader(std::string_view bytes);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  std::size_t entries() const;
  std::string name(std::size_t index) const;
  std::optional<std::size_t> find(const std::string& name) const;
  // The whole entry. Throws IOError naming it when it is damaged (size, CRC-32, compression).
  std::string read(std::size_t index) const;

 private:
  std::string_view bytes_;
  struct zip* archive_ = nullptr;
};

// An archive of `entries` (name, contents) in this order, stored uncompressed with a fixed
// modification time, so that the same entries always give the same bytes; each entry's data
// begins at a multiple of 64 bytes, as in the archives PyTorch writes.
std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& entries);

}  // namespace ddp::detail::weights
