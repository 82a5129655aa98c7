#pragma once
// Two network namespaces as two hosts, for the measurements that must cross real
// interfaces (`actortrain bench transport --netns`, `actortrain scale predict --netns`).
// Made with the ip command (root), removed when the object goes. Addresses 10.x.y.1 and
// .2/24, x and y from the process id; they exist only inside the pair's own namespaces.

#include <string>

namespace actortrain::tools {

class netns_pair {
 public:
  /// `bridged`: each namespace's eth0 is one end of a veth pair whose other end is on a
  /// bridge in a third namespace, as tests/cluster/netns.sh and tools/bench/netns_cluster
  /// make a cluster's hosts (two veth hops and a bridge between them); otherwise the two
  /// are joined by one veth pair. Throws std::runtime_error naming the command that
  /// failed (it needs root and the ip command), having removed what it made.
  /// `tag` names them (at-<tag>-<pid>-...), so that two users in one process differ.
  netns_pair(const std::string& tag, bool bridged);
  ~netns_pair();
  netns_pair(const netns_pair&) = delete;
  netns_pair& operator=(const netns_pair&) = delete;

  const std::string& server() const { return server_; }
  const std::string& server_ip() const { return server_ip_; }
  const std::string& client() const { return client_; }

 private:
  void remove();
  std::string server_, client_, bridge_, server_ip_, client_ip_;
};

/// Moves the calling thread (and the threads it starts later) into the network
/// namespace `name` (/var/run/netns/NAME); throws std::runtime_error naming it.
void enter_netns(const std::string& name);

}  // namespace actortrain::tools
