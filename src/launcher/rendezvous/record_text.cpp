#include "rendezvous/record_text.h"

namespace ddp::launcher {

std::string escape_field(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_field(std::string_view value) {
  std::string out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) {
      out += value[i + 1] == 'n' ? '\n' : value[i + 1];
      ++i;
    } else {
      out += value[i];
    }
  }
  return out;
}

std::int64_t to_millis(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

std::chrono::system_clock::time_point from_millis(std::int64_t millis) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(millis));
}

void for_each_field(const std::string& text, std::size_t skip, const std::function<Error(const std::string&)>& bad,
                    const std::function<void(std::string_view key, std::string_view value)>& field) {
  std::size_t pos = skip;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) throw bad("a line without '='");
    field(line.substr(0, eq), line.substr(eq + 1));
  }
}

}  // namespace ddp::launcher
