// A plain job's membership proof (job_auth.hpp).
#include "job_auth.hpp"

#include <actortrain/actors/net/cluster_file.hpp>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace actortrain::detail {

namespace {

constexpr unsigned char magic[8] = {'A', 'T', 'J', 'O', 'B', '1', 0, 0};
constexpr size_t min_secret = 16, max_secret = 4096;

void fill_random(unsigned char* p, size_t n) {
  while (n > 0) {
    auto got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("no random bytes: {}", std::strerror(errno)));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

// HMAC-SHA256(key, label a b).
std::array<unsigned char, 32> mac(const job_key& key, const char* label, const unsigned char* a,
                                  const unsigned char* b) {
  std::vector<unsigned char> msg(label, label + std::strlen(label));
  msg.insert(msg.end(), a, a + auth::nonce_size);
  msg.insert(msg.end(), b, b + auth::nonce_size);
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), out.data(), &len) ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed");
  return out;
}

bool same(const unsigned char* a, const unsigned char* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace

job_key read_job_secret(const std::string& path) {
  auto bad = [&](const std::string& what) {
    return cluster_file_error(fmt::format("secret {}: {}", path, what));
  };
  net::unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (!fd) throw bad(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) throw bad(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  if (st.st_uid != ::geteuid())
    throw bad(fmt::format("belongs to user {}, not to this user ({}): only the job's user may hold it", st.st_uid,
                          ::geteuid()));
  if ((st.st_mode & 077) != 0)
    throw bad(fmt::format("mode {:04o} lets group or others at it: chmod 600 {}", st.st_mode & 07777, path));
  if (st.st_size < static_cast<off_t>(min_secret) || st.st_size > static_cast<off_t>(max_secret))
    throw bad(fmt::format("holds {} bytes; a secret holds {} to {} (e.g. head -c 32 /dev/urandom)", st.st_size,
                          min_secret, max_secret));
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    auto n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw bad(n == 0 ? std::string("shorter than it was a moment ago") : std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  job_key key{};
  SHA256(bytes.data(), bytes.size(), key.data());
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return key;
}

}  // namespace actortrain::detail

namespace actortrain {

void write_job_secret(const std::string& path) {
  net::unique_fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!fd) throw std::runtime_error(fmt::format("cannot create the job's secret {}: {}", path, std::strerror(errno)));
  std::array<unsigned char, 32> bytes{};
  detail::fill_random(bytes.data(), bytes.size());
  if (::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    throw std::runtime_error(fmt::format("cannot write the job's secret {}: {}", path, std::strerror(errno)));
  OPENSSL_cleanse(bytes.data(), bytes.size());
}

}  // namespace actortrain

namespace actortrain::detail {

std::string key_to_hex(const job_key& key) {
  std::string s;
  for (auto b : key) s += fmt::format("{:02x}", b);
  return s;
}

job_key key_from_hex(const std::string& hex) {
  if (hex.size() != 64) throw std::invalid_argument("a job key is 64 hex digits");
  job_key key{};
  for (size_t i = 0; i < key.size(); ++i) {
    auto digit = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      throw std::invalid_argument("a job key is 64 hex digits");
    };
    key[i] = static_cast<unsigned char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  }
  return key;
}

namespace auth {

server::server(const job_key& key) : key_(key) {
  std::memcpy(hello_.data(), magic, sizeof magic);
  fill_random(hello_.data() + sizeof magic, nonce_size);
}

bool server::admit(const answer& a, proof& out) const {
  const unsigned char* ns = hello_.data() + sizeof magic;
  const unsigned char* nc = a.data();
  auto expected = mac(key_, "client", ns, nc);
  if (!same(expected.data(), a.data() + nonce_size, expected.size())) {
    out.fill(0);
    return false;
  }
  out = mac(key_, "server", nc, ns);
  return true;
}

answer client::respond(const hello& h) {
  if (std::memcmp(h.data(), magic, sizeof magic) != 0)
    throw refused("the peer is not a plain ActorTrain node (its first bytes are not a job's greeting: TLS on its "
                  "side only, or another program)");
  std::memcpy(ns_.data(), h.data() + sizeof magic, nonce_size);
  fill_random(nc_.data(), nonce_size);
  answer a{};
  std::memcpy(a.data(), nc_.data(), nonce_size);
  auto m = mac(key_, "client", ns_.data(), nc_.data());
  std::memcpy(a.data() + nonce_size, m.data(), m.size());
  return a;
}

void client::check(const proof& p) const {
  proof zero{};
  if (same(p.data(), zero.data(), zero.size()))
    throw refused("the peer refused this job's secret (a node of another job, or another secret file)");
  auto expected = mac(key_, "server", nc_.data(), ns_.data());
  if (!same(expected.data(), p.data(), expected.size()))
    throw refused("the peer does not know this job's secret (a node of another job, or another secret file)");
}

net::unique_fd dial_member(const std::string& host, uint16_t port, const job_key& key,
                           std::chrono::milliseconds bound) {
  using clock = std::chrono::steady_clock;
  auto until = clock::now() + bound;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()));
  };
  auto fd = net::connect_to(host, port, bound);
  net::set_no_delay(fd.get());
  client c{key};
  hello h{};
  try {
    if (!net::read_exact_within(fd.get(), h.data(), h.size(), left()))
      throw net::socket_error(fmt::format("{}:{}", host, port), "closed before its greeting", 0);
  } catch (const net::socket_error& e) {
    if (e.code() != ETIMEDOUT) throw;
    throw net::socket_error(fmt::format("{}:{}", host, port),
                            fmt::format("no job greeting within {} ms (a TLS node, or not an ActorTrain node?)",
                                        bound.count()),
                            ETIMEDOUT);
  }
  auto a = c.respond(h);
  net::write_exact(fd.get(), a.data(), a.size());
  proof p{};
  if (!net::read_exact_within(fd.get(), p.data(), p.size(), left()))
    throw net::socket_error(fmt::format("{}:{}", host, port), "closed before its proof", 0);
  c.check(p);
  return fd;
}

}  // namespace auth
}  // namespace actortrain::detail
