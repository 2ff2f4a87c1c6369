// A file written whole or not at all, safe in a folder other users may write (/tmp): the
// trace files of gslice run --trace, gslice trace -o and gsliced's kept traces.
//
// Nothing is ever written through a name another user could have planted. The content goes
// into an unnamed file made in the target's folder (O_TMPFILE) or, where the file system has
// none, into a new file of a random name made with O_CREAT|O_EXCL|O_NOFOLLOW (which fails
// rather than open what is there). Commit gives an unnamed file a fresh random name with
// linkat (which never replaces an existing name), then renames that name over the target:
// rename(2) replaces whatever is at the target, a symbolic link included, and never writes
// through it. A reader sees the old file or the new one, never part of one.
//
// The target's folder is opened once and every later step is relative to that descriptor, so
// a folder renamed or replaced meanwhile cannot redirect the file. A folder that every user may
// write and that is not sticky is refused: anyone could replace the file in it at any time.
//
// REQUIRES: one thread uses an AtomicFile at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace gslice {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();  // discards a file that was not committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Starts the file that will replace `path`, created with `mode` less the umask (as open(2)),
  // owned by the caller. False with *error (a sentence naming path) when its folder cannot
  // take it or is writable by every user and not sticky.
  bool Open(const std::string& path, mode_t mode, std::string* error);

  // The file being written (e.g. for fchmod). REQUIRES: Open succeeded.
  int fd() const { return fd_; }

  // Appends n bytes. False (errno set) when they could not all be written.
  bool Write(const void* data, size_t n);
  bool Write(std::string_view text) { return Write(text.data(), text.size()); }

  // Flushes the file to disk and puts it at path in one step. False with *error when it could
  // not: then path is as it was and nothing of the new file is left in the folder.
  // REQUIRES: Open succeeded, Commit not called yet.
  bool Commit(std::string* error);

 private:
  void Discard();

  int dir_fd_ = -1;
  int fd_ = -1;
  std::string path_;  // as the caller named it, for messages
  std::string base_;  // its last component, relative to dir_fd_
  std::string temp_;  // the file's temporary name in the folder ("" while it has none)
};

// Writes text to path whole through an AtomicFile. False with *error when it could not.
bool WriteFileAtomically(const std::string& path, std::string_view text, mode_t mode, std::string* error);

}  // namespace gslice
