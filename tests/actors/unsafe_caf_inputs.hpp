#pragma once
// Messages as CAF 0.17 writes them (its type names, then each element) that CAF 0.17.6
// cannot read safely from a peer (refused_caf_content in actors/src/net/basp_check.hpp);
// tools/fuzzers/known/ holds each as a file. For the BASP guard's and the data plane's
// tests.
#include <string>

namespace unsafe_caf {

// How a message begins: two bytes of 0, then its element types as one string ("@<>" and
// "+name" for each) after its length (one byte: every list here is shorter than 128).
inline std::string names(const std::string& list) {
  auto s = "@<>" + list;
  return std::string(2, '\0') + static_cast<char>(s.size()) + s;
}

// A length of 0xffffffff (varbyte ff ff ff ff 0f) and one byte.
inline const std::string huge_length("\xff\xff\xff\xff\x0f" "a", 6);
// CAF's atom "uri" as a node id's kind (8 bytes, big-endian).
inline const std::string uri_kind("\0\0\0\0\0\x3f\xad\xee", 8);

/// A std::vector<char> announcing 4 GiB: CAF allocates and zeroes it, then finds 1 byte.
inline const std::string charbuf = names("+@charbuf") + huge_length;
/// The middleman's new_data_msg (a connection handle, then a std::vector<char>): the same.
inline const std::string new_data_msg = names("+@new_data_msg") + std::string(8, '\0') + huge_length;
/// settings (a dictionary of config_values) with one entry of variant index 200: throws.
inline const std::string settings = names("+settings") + std::string("\x01\x00\xc8", 3);
/// A node id of the uri kind whose host (a variant) has index 200: throws, and is not
/// refused (see refused_caf_content).
inline const std::string node_uri = names("+@node") + uri_kind + std::string("\x00\x00\xc8", 3);
/// A duration of unit 0xffffffff: read without complaint, a crash when CAF prints it.
inline const std::string duration = names("+@duration") + std::string("\xff\xff\xff\xff", 4) + std::string(8, '\0');
/// A config_value of variant index 200: throws.
inline const std::string config_value = names("+@config_value") + "\xc8";

}  // namespace unsafe_caf
