#include "netns.hpp"

#include <actortrain/actors/net/sockets.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace actortrain::tools {

netns_pair::netns_pair(const std::string& tag, bool bridged) {
  const auto prefix = fmt::format("at-{}-{}", tag, ::getpid());
  server_ = prefix + "-a";
  client_ = prefix + "-b";
  const auto net = fmt::format("10.{}.{}", 200 + ::getpid() % 50, (::getpid() / 50) % 250);
  server_ip_ = net + ".1";
  client_ip_ = net + ".2";
  std::vector<std::string> cmds{fmt::format("ip netns add {}", server_), fmt::format("ip netns add {}", client_)};
  if (bridged) {
    bridge_ = prefix + "-br";
    cmds.insert(cmds.end(), {fmt::format("ip netns add {}", bridge_), fmt::format("ip -n {} link add br0 type bridge", bridge_),
                             fmt::format("ip -n {} link set br0 up", bridge_)});
    int i = 0;
    for (auto* ns : {&server_, &client_}) {
      cmds.push_back(fmt::format("ip -n {} link add eth0 type veth peer name b{} netns {}", *ns, i, bridge_));
      cmds.push_back(fmt::format("ip -n {} link set b{} master br0", bridge_, i));
      cmds.push_back(fmt::format("ip -n {} link set b{} up", bridge_, i));
      ++i;
    }
  } else {
    cmds.push_back(fmt::format("ip -n {} link add eth0 type veth peer name eth0 netns {}", server_, client_));
  }
  cmds.insert(cmds.end(), {fmt::format("ip -n {} addr add {}/24 dev eth0", server_, server_ip_),
                           fmt::format("ip -n {} addr add {}/24 dev eth0", client_, client_ip_),
                           fmt::format("ip -n {} link set eth0 up", server_), fmt::format("ip -n {} link set eth0 up", client_),
                           fmt::format("ip -n {} link set lo up", server_), fmt::format("ip -n {} link set lo up", client_)});
  for (auto& cmd : cmds)
    if (std::system((cmd + " 2>/dev/null").c_str()) != 0) {
      remove();
      throw std::runtime_error(fmt::format("'{}' failed (network namespaces need root and the ip command)", cmd));
    }
}

netns_pair::~netns_pair() { remove(); }

void netns_pair::remove() {
  auto cmd = fmt::format("ip netns del {} 2>/dev/null; ip netns del {} 2>/dev/null", server_, client_);
  if (!bridge_.empty()) cmd += fmt::format("; ip netns del {} 2>/dev/null", bridge_);
  (void)std::system(cmd.c_str());
}

void enter_netns(const std::string& name) {
  net::unique_fd ns{::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC)};
  if (!ns || ::setns(ns.get(), CLONE_NEWNET) != 0)
    throw std::runtime_error(fmt::format("cannot enter network namespace {}: {}", name, std::strerror(errno)));
}

}  // namespace actortrain::tools
