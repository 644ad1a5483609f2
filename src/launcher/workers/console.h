// Where the workers' lines meet: ddprun's stdout and stderr. When one worker's stdout is a
// terminal of its own (a pseudo-terminal, because ddprun's stdout is a terminal), its unfinished
// line (a progress bar redrawn with '\r') is the live line: drawn in place as it changes, taken
// off the screen while another line is written and drawn again below it, so that the bar stays
// a bar at the bottom and never shares a line with other output. Without a live line, a line
// is one write, as before. Single-threaded.
#pragma once

#include <string>
#include <string_view>

namespace ddp::launcher {

class Console {
 public:
  // Writes `text` and '\n' to `fd` in one write, around the live line if one is shown.
  void line(int fd, std::string_view text);
  // Shows `text` (no '\n') as the live line on `fd` (a terminal), replacing the one shown.
  void live(int fd, std::string_view text);
  // The live line is done: `text` replaces it for good, with '\n'.
  void end_live(int fd, std::string_view text);

 private:
  int live_fd_ = -1;  // -1: no live line is shown
  std::string live_;
  std::string scratch_;
};

}  // namespace ddp::launcher
