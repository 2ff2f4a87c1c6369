#include "added_delay.h"

#include <unistd.h>

#include <algorithm>

namespace gslice::remote {

bool ParseAddedDelay(const char* text, int64_t* round_trip_ns, std::string* error) {
  *round_trip_ns = 0;
  if (text == nullptr || text[0] == '\0') return true;
  int64_t us = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || us > kMaxAddedDelayUs) {
      *error = std::string("GSLICE_REMOTE_ADDED_DELAY_US=") + text + ": not a whole number of microseconds from 0 to " +
               std::to_string(kMaxAddedDelayUs);
      return false;
    }
    us = us * 10 + (*c - '0');
  }
  if (us > kMaxAddedDelayUs) {
    *error = std::string("GSLICE_REMOTE_ADDED_DELAY_US=") + text + ": more than " +
             std::to_string(kMaxAddedDelayUs) + " microseconds";
    return false;
  }
  *round_trip_ns = us * 1000;
  return true;
}

void DelayLine::Push(Piece piece) {
  bytes_ += piece.bytes.size();
  line_.push_back(std::move(piece));
  stats_.most_on_line = std::max<uint64_t>(stats_.most_on_line, line_.size());
}

int64_t DelayLine::NextDue() const { return line_.empty() ? -1 : line_.front().sent_ns + stats_.round_trip_ns; }

void DelayLine::TakeDue(int64_t now_ns, std::vector<Piece>* out) {
  while (!line_.empty() && line_.front().sent_ns + stats_.round_trip_ns <= now_ns) {
    Piece& piece = line_.front();
    const int64_t held = now_ns - piece.sent_ns;
    if (stats_.least_held_ns < 0 || held < stats_.least_held_ns) stats_.least_held_ns = held;
    ++stats_.pieces;
    bytes_ -= piece.bytes.size();
    out->push_back(std::move(piece));
    line_.pop_front();
  }
}

void DelayLine::Clear() {
  for (const Piece& piece : line_) {
    if (piece.pass_fd >= 0) close(piece.pass_fd);
  }
  line_.clear();
  bytes_ = 0;
}

}  // namespace gslice::remote
