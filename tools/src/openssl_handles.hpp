#pragma once
// OpenSSL handles and errors for the `actortrain` command's own TLS measurements (bench
// transport's raw TLS baseline, scale's TLS cost): owners that free a context and a
// session, and the error queue as text. The library's TLS (actors/src/net/tls.cpp) has
// its own, private to it.

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace actortrain::tools {

/// OpenSSL's queued errors, "; "-separated (emptying the queue).
inline std::string ssl_errors() {
  std::string out;
  char buf[256];
  for (unsigned long e; (e = ::ERR_get_error()) != 0;) {
    ::ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

struct ssl_ctx_free {
  void operator()(SSL_CTX* c) const { ::SSL_CTX_free(c); }
};
struct ssl_free {
  void operator()(SSL* s) const { ::SSL_free(s); }
};
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, ssl_ctx_free>;
using ssl_ptr = std::unique_ptr<SSL, ssl_free>;

}  // namespace actortrain::tools
