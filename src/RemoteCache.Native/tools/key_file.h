// Admission key files, as remotecache-server and remotecache-capability read them: the key is the
// file's bytes, exactly (nothing is trimmed, so every reader of the file, the manager included, gets
// the same key). The file must be readable by its owner only, as for ssh keys: a key others can read
// admits them.
#pragma once

#include <sys/stat.h>

#include <remotecache/remotecache.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace rc::tools {

// The key, or an empty vector with `why` set.
inline std::vector<uint8_t> read_key_file(const std::string& path, std::string& why) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    why = "cannot read the admission key file " + path;
    return {};
  }
  if ((st.st_mode & 077) != 0) {
    why = "the admission key file " + path + " is readable or writable by others (mode " +
          std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
          "): chmod 600 it";
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (key.size() < RC_MIN_ADMISSION_KEY_BYTES) {
    why = "the admission key in " + path + " has " + std::to_string(key.size()) + " bytes; at least " +
          std::to_string(RC_MIN_ADMISSION_KEY_BYTES) + " are needed";
    return {};
  }
  return key;
}

}  // namespace rc::tools
