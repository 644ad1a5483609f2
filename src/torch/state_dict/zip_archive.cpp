#include "state_dict/zip_archive.h"

#include <zip.h>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail::weights {
namespace {

// Deflate cannot expand data more than about 1032 times.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::uint64_t kLocalHeader = 30;      // a local file header's fixed part
constexpr std::uint64_t kAlignment = 64;        // where PyTorch's writer puts each entry's data
constexpr zip_uint16_t kPaddingField = 0x4246;  // "FB", PyTorch's padding extra field

struct ZipError {
  ZipError() { zip_error_init(&error); }
  ~ZipError() { zip_error_fini(&error); }
  std::string text() { return zip_error_strerror(&error); }
  zip_error_t error;
};

}  // namespace

ZipReader::ZipReader(std::string_view bytes) : bytes_(bytes) {
  ZipError error;
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error.error);
  if (!source) throw IOError(cat("cannot read the zip archive (libzip: ", error.text(), ")"));
  archive_ = zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error.error);
  if (!archive_) {
    zip_source_free(source);
    throw IOError(cat("a damaged or truncated zip archive of ", bytes.size(), " bytes (libzip: ", error.text(),
                      "): was it copied completely?"));
  }
}

ZipReader::~ZipReader() {
  if (archive_) zip_discard(archive_);
}

std::size_t ZipReader::entries() const {
  const auto n = zip_get_num_entries(archive_, 0);
  return n < 0 ? 0 : static_cast<std::size_t>(n);
}

std::string ZipReader::name(std::size_t index) const {
  const char* name = zip_get_name(archive_, index, ZIP_FL_ENC_RAW);
  return name ? name : "";
}

std::optional<std::size_t> ZipReader::find(const std::string& name) const {
  const auto index = zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW);
  if (index < 0) return std::nullopt;
  return static_cast<std::size_t>(index);
}

std::string ZipReader::read(std::size_t index) const {
  const std::string entry = quote(name(index), 200);
  zip_stat_t st;
  zip_stat_init(&st);
  const auto needed = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if (zip_stat_index(archive_, index, 0, &st) != 0 || (st.valid & needed) != needed) {
    throw IOError(cat("damaged: entry ", entry, " has no size (libzip: ", zip_strerror(archive_), ")"));
  }
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE) {
    throw IOError(cat("entry ", entry, " is encrypted"));
  }
  if (st.comp_method == ZIP_CM_STORE) {
    if (st.size != st.comp_size || st.size > bytes_.size()) {
      throw IOError(cat("damaged: stored entry ", entry, " claims ", st.size, " bytes in ", st.comp_size,
                        " bytes of an archive of ", bytes_.size()));
    }
  } else if (st.comp_method == ZIP_CM_DEFLATE) {
    if (st.comp_size > bytes_.size() || st.size / kMaxDeflateRatio > st.comp_size) {
      throw IOError(cat("damaged: entry ", entry, " claims ", st.size, " bytes from ", st.comp_size,
                        " compressed bytes, more than deflate can hold"));
    }
  } else {
    throw IOError(cat("entry ", entry, " uses zip compression method ", st.comp_method,
                      " (torch.save stores entries uncompressed; deflate is read too)"));
  }
  zip_file_t* file = zip_fopen_index(archive_, index, 0);
  if (!file) throw IOError(cat("damaged: cannot open entry ", entry, " (libzip: ", zip_strerror(archive_), ")"));
  std::string out(static_cast<std::size_t>(st.size), '\0');
  std::size_t done = 0;
  std::string fault;
  while (fault.empty() && done < out.size()) {
    const auto n = zip_fread(file, out.data() + done, out.size() - done);
    if (n < 0) fault = zip_file_strerror(file);
    else if (n == 0) fault = cat("it ends after ", done, " of its ", out.size(), " bytes");
    else done += static_cast<std::size_t>(n);
  }
  if (fault.empty()) {
    char extra;  // reading to the end is what makes libzip check the CRC-32
    const auto n = zip_fread(file, &extra, 1);
    if (n < 0) fault = zip_file_strerror(file);
    else if (n > 0) fault = cat("it holds more than its ", out.size(), " bytes");
  }
  const int closed = zip_fclose(file);
  if (fault.empty() && closed != 0) fault = zip_error_strerror(zip_get_error(archive_));
  if (!fault.empty()) throw IOError(cat("damaged: entry ", entry, ": ", fault));
  return out;
}

std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& entries) {
  ZipError error;
  zip_source_t* target = zip_source_buffer_create(nullptr, 0, 0, &error.error);
  if (!target) throw IOError(cat("cannot make a zip archive (libzip: ", error.text(), ")"));
  zip_t* archive = zip_open_from_source(target, ZIP_TRUNCATE, &error.error);
  if (!archive) {
    zip_source_free(target);
    throw IOError(cat("cannot make a zip archive (libzip: ", error.text(), ")"));
  }
  zip_source_keep(target);  // the bytes are read from it after zip_close
  auto fail = [&](const std::string& what) {
    const std::string reason = zip_strerror(archive);
    zip_discard(archive);
    zip_source_free(target);
    throw IOError(cat("cannot make a zip archive: ", what, " (libzip: ", reason, ")"));
  };
  std::uint64_t offset = 0;  // of the next local header: libzip writes the entries in order
  const std::string padding(kAlignment + 4, 'Z');
  for (const auto& [name, data] : entries) {
    zip_source_t* source = zip_source_buffer(archive, data.data(), data.size(), 0);
    if (!source) fail("entry " + name);
    const auto index = zip_file_add(archive, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      fail("entry " + name);
    }
    // 1980-01-01 00:00, the first DOS date: the same entries give the same bytes.
    if (zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_dostime(archive, static_cast<zip_uint64_t>(index), 0, (1 << 5) | 1, 0) != 0) {
      fail("entry " + name);
    }
    // As PyTorch's writer: an extra field of padding ("FB") in the local header puts the data at
    // a multiple of 64 bytes, so that a reader can map the file and use the tensors in place.
    const std::uint64_t header = kLocalHeader + name.size() + 4;  // 4: the extra field's id and length
    auto pad = static_cast<zip_uint16_t>((kAlignment - (offset + header) % kAlignment) % kAlignment);
    if (pad == 0) pad = kAlignment;  // never an empty field, which a writer might leave out
    if (zip_file_extra_field_set(archive, static_cast<zip_uint64_t>(index), kPaddingField, ZIP_EXTRA_FIELD_NEW,
                                 reinterpret_cast<const zip_uint8_t*>(padding.data()), pad, ZIP_FL_LOCAL) != 0) {
      fail("entry " + name);
    }
    offset += header + pad + data.size();
  }
  if (zip_close(archive) != 0) fail("closing");
  std::string out;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_source_open(target) != 0 || zip_source_stat(target, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    zip_source_free(target);
    throw IOError("cannot make a zip archive: its bytes cannot be read back from libzip");
  }
  out.resize(static_cast<std::size_t>(st.size));
  const auto n = zip_source_read(target, out.data(), out.size());
  zip_source_close(target);
  zip_source_free(target);
  if (n < 0 || static_cast<std::size_t>(n) != out.size()) {
    throw IOError("cannot make a zip archive: its bytes cannot be read back from libzip");
  }
  return out;
}

}  // namespace ddp::detail::weights
