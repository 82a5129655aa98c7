// Mutual TLS driven by ActorTrain (tls.hpp).
#include "tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

namespace actortrain::detail::tls {

namespace {

// OpenSSL's queued errors, oldest first, as one line (the queue is emptied).
std::string queued_errors() {
  std::string s;
  while (auto e = ::ERR_get_error()) {
    char buf[256];
    ::ERR_error_string_n(e, buf, sizeof buf);
    // "error:0A000086:SSL routines::certificate verify failed": the reason is the last part.
    std::string one = buf;
    auto colon = one.rfind(':');
    if (colon != std::string::npos && colon + 1 < one.size()) one = one.substr(colon + 1);
    if (!s.empty()) s += "; ";
    s += one;
  }
  return s;
}

// OpenSSL writes with write(2): a peer that reset the connection would raise SIGPIPE and
// end the process. While one of these lives, SIGPIPE is blocked on this thread, and one
// raised meanwhile is taken before the mask comes back (the write fails with EPIPE).
class no_sigpipe {
 public:
  no_sigpipe() {
    if ((skip_ = net::sigpipe_ignored())) return;  // the process ignores it: nothing to do
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~no_sigpipe() {
    if (skip_) return;
    if (!was_pending_) {
      timespec zero{0, 0};
      while (::sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  no_sigpipe(const no_sigpipe&) = delete;
  no_sigpipe& operator=(const no_sigpipe&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
  bool skip_ = false;
};

}  // namespace

context::context(const files& f) {
  ::ERR_clear_error();
  ctx_ = ::SSL_CTX_new(::TLS_method());
  if (!ctx_) throw std::runtime_error("TLS: cannot make a context: " + queued_errors());
  auto fail = [&](const std::string& what, const std::string& path) {
    auto reason = queued_errors();
    ::SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error(fmt::format("TLS: {} {}: {}", what, path, reason.empty() ? "unreadable" : reason));
  };
  if (::SSL_CTX_use_certificate_chain_file(ctx_, f.certificate.c_str()) != 1)
    fail("cannot read the certificate", f.certificate);
  if (::SSL_CTX_use_PrivateKey_file(ctx_, f.key.c_str(), SSL_FILETYPE_PEM) != 1) fail("cannot read the key", f.key);
  if (::SSL_CTX_check_private_key(ctx_) != 1) fail("the key does not belong to the certificate", f.certificate);
  if (::SSL_CTX_load_verify_locations(ctx_, f.ca.c_str(), nullptr) != 1) fail("cannot read the CA", f.ca);
  ::SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  // Both sides present a certificate chained to the job's CA, and check the other's.
  ::SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Partial writes from a buffer that may move: the relay writes what it holds.
  ::SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Reads as much as has arrived, not one record header and then its body: fewer reads.
  ::SSL_CTX_set_read_ahead(ctx_, 1);
  ::SSL_CTX_set_default_read_buffer_len(ctx_, 256 * 1024);
  // Sessions are not resumed (a connection lives as long as its task): no tickets to keep.
  ::SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);
  ::SSL_CTX_set_num_tickets(ctx_, 0);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A peer that ends without close_notify (a killed task) is a closed connection.
  ::SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
}

context::~context() {
  if (ctx_) ::SSL_CTX_free(ctx_);
}

std::shared_ptr<const context> context_for(const files& f) {
  static std::mutex mtx;
  static std::map<std::tuple<std::string, std::string, std::string>, std::shared_ptr<const context>> made;
  std::lock_guard<std::mutex> g{mtx};
  auto& c = made[{f.certificate, f.key, f.ca}];
  if (!c) c = std::make_shared<const context>(f);
  return c;
}

session::session(const context& ctx, int fd, bool server) {
  ssl_ = ::SSL_new(ctx.get());
  if (!ssl_ || ::SSL_set_fd(ssl_, fd) != 1) {
    if (ssl_) ::SSL_free(ssl_);
    ssl_ = nullptr;
    throw std::runtime_error("TLS: cannot make a session: " + queued_errors());
  }
  if (server)
    ::SSL_set_accept_state(ssl_);
  else
    ::SSL_set_connect_state(ssl_);
}

session::~session() {
  if (ssl_) ::SSL_free(ssl_);  // no close_notify: the socket closes right after
}

status session::outcome(int ret, const char* what) {
  auto e = ::SSL_get_error(ssl_, ret);
  switch (e) {
    case SSL_ERROR_WANT_READ: return status::want_read;
    case SSL_ERROR_WANT_WRITE: return status::want_write;
    case SSL_ERROR_ZERO_RETURN: return status::closed;
    case SSL_ERROR_SYSCALL: {
      auto saved = errno;
      auto queued = queued_errors();
      if (!queued.empty()) {
        why_ = fmt::format("{}: {}", what, queued);
        return status::failed;
      }
      if (ret == 0 || saved == 0 || saved == ECONNRESET || saved == EPIPE) return status::closed;
      why_ = fmt::format("{}: {}", what, std::strerror(saved));
      return status::failed;
    }
    default: {
      auto verify = ::SSL_get_verify_result(ssl_);
      auto queued = queued_errors();
      if (verify != X509_V_OK)
        why_ = fmt::format("{}: the peer's certificate: {}", what, ::X509_verify_cert_error_string(verify));
      else
        why_ = fmt::format("{}: {}", what, queued.empty() ? std::string("protocol error") : queued);
      return status::failed;
    }
  }
}

status session::handshake() {
  no_sigpipe quiet;
  ::ERR_clear_error();
  int r = ::SSL_do_handshake(ssl_);
  return r == 1 ? status::ok : outcome(r, "TLS handshake");
}

status session::read(char* data, size_t n, size_t& got) {
  no_sigpipe quiet;
  ::ERR_clear_error();
  got = 0;
  int r = ::SSL_read_ex(ssl_, data, n, &got);
  return r == 1 ? status::ok : outcome(r, "TLS read");
}

status session::write(const char* data, size_t n, size_t& put) {
  no_sigpipe quiet;
  ::ERR_clear_error();
  put = 0;
  int r = ::SSL_write_ex(ssl_, data, n, &put);
  return r == 1 ? status::ok : outcome(r, "TLS write");
}

status session::peek() {
  no_sigpipe quiet;
  ::ERR_clear_error();
  char byte;
  size_t got = 0;
  int r = ::SSL_peek_ex(ssl_, &byte, 1, &got);
  return r == 1 ? status::ok : outcome(r, "TLS read");
}

void session::buffer_writes(size_t bytes) {
  if (buffer_) return;
  auto* sock = ::BIO_new_socket(::SSL_get_fd(ssl_), BIO_NOCLOSE);
  auto* buf = ::BIO_new(::BIO_f_buffer());
  if (!sock || !buf || BIO_set_write_buffer_size(buf, static_cast<long>(bytes)) != 1) {
    ::BIO_free(sock);
    ::BIO_free(buf);
    return;  // unbuffered, as before: correct, only slower
  }
  ::BIO_push(buf, sock);
  // Reads stay on the socket's BIO; the session takes the reference of the new writer
  // (SSL_set_bio with an unchanged rbio) and frees the pair with itself.
  ::SSL_set_bio(ssl_, ::SSL_get_rbio(ssl_), buf);
  buffer_ = buf;
}

status session::flush() {
  if (!buffer_) return status::ok;
  no_sigpipe quiet;
  ::ERR_clear_error();
  if (BIO_flush(buffer_) == 1) return status::ok;
  if (BIO_should_retry(buffer_)) return status::want_write;
  auto saved = errno;
  if (saved == EPIPE || saved == ECONNRESET) return status::closed;
  why_ = fmt::format("TLS write: {}", saved ? std::strerror(saved) : "the socket refused the buffered records");
  return status::failed;
}

bool session::buffered() const { return ::SSL_has_pending(ssl_) == 1; }

std::string session::peer_subject() const {
  auto* cert = ::SSL_get1_peer_certificate(ssl_);
  if (!cert) return {};
  char buf[256] = {};
  ::X509_NAME_oneline(::X509_get_subject_name(cert), buf, sizeof buf);
  ::X509_free(cert);
  return buf;
}

using clock_type = std::chrono::steady_clock;

bool wait_ready(int fd, status s, clock_type::time_point until) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, static_cast<short>(s == status::want_write ? POLLOUT : POLLIN), 0};
    int k = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (k > 0) return true;
    if (k < 0 && errno != EINTR) return false;
  }
}

namespace {

// Runs `step` on `tls` until it is done, waiting on `fd` for what it asks, until `until`;
// failures as dial and accept report them (`where` names the peer).
template <class Step>
void drive(session& tls, int fd, const std::string& where, clock_type::time_point until, std::chrono::milliseconds bound,
           Step step, const char* closed_when, const char* late) {
  for (;;) {
    auto s = step();
    if (s == status::ok) return;
    if (s == status::failed)
      throw refused(fmt::format("the TLS handshake failed: {} (a certificate of another CA, or a peer without TLS)",
                                tls.why()));
    if (s == status::closed) throw net::socket_error(where, fmt::format("closed {}", closed_when), 0);
    if (!wait_ready(fd, s, until))
      throw net::socket_error(where, fmt::format("{} within {} ms", late, bound.count()), ETIMEDOUT);
  }
}

void make_non_blocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

std::unique_ptr<session> accept(int fd, const context& ctx, std::chrono::milliseconds bound) {
  auto until = clock_type::now() + bound;
  make_non_blocking(fd);
  auto tls = std::make_unique<session>(ctx, fd, /*server=*/true);
  drive(*tls, fd, net::peer_text(fd), until, bound, [&] { return tls->handshake(); }, "during the TLS handshake",
        "no TLS handshake");
  return tls;
}

connection dial(const std::string& host, uint16_t port, const context& ctx, std::chrono::milliseconds bound,
                bool server_speaks_first) {
  auto until = clock_type::now() + bound;
  auto where = fmt::format("{}:{}", host, port);
  connection c;
  c.fd = net::connect_to(host, port, bound);
  net::set_no_delay(c.fd.get());
  make_non_blocking(c.fd.get());
  c.tls = std::make_unique<session>(ctx, c.fd.get(), /*server=*/false);
  auto& tls = *c.tls;
  int fd = c.fd.get();
  drive(tls, fd, where, until, bound, [&] { return tls.handshake(); }, "during the TLS handshake", "no TLS handshake");
  // With TLS 1.3 the server checks our certificate after our side of the handshake
  // ended: its refusal (an alert) or its first bytes (BASP's server handshake) come next.
  // Wait for either, so that a refusal is final here and not a connection cut later.
  if (server_speaks_first)
    drive(tls, fd, where, until, bound, [&] { return tls.peek(); }, "right after the TLS handshake",
          "nothing after the TLS handshake");
  return c;
}

}  // namespace actortrain::detail::tls
