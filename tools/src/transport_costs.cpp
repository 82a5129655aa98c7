#include "transport_costs.hpp"

#include "bench.hpp"
#include "netns.hpp"
#include "openssl_handles.hpp"

#include <actortrain/actors/net/sockets.hpp>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <time.h>

namespace actortrain::tools {

namespace {

using namespace std::chrono_literals;

constexpr size_t chunk = size_t{1} << 20, chunks = 128;

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// A server context with a throwaway self-signed P-256 certificate made in memory, and a
// client context that does not check it: the measurement is of the record layer, and
// the handshake's CPU (about a millisecond) is noise beside 128 MiB.
std::pair<ssl_ctx_ptr, ssl_ctx_ptr> tls_contexts() {
  std::unique_ptr<EVP_PKEY, decltype(&::EVP_PKEY_free)> key{::EVP_EC_gen("P-256"), &::EVP_PKEY_free};
  std::unique_ptr<X509, decltype(&::X509_free)> cert{::X509_new(), &::X509_free};
  if (!key || !cert) throw std::runtime_error("--tls: cannot make a key: " + ssl_errors());
  auto* x = cert.get();
  ::ASN1_INTEGER_set(::X509_get_serialNumber(x), 1);
  ::X509_gmtime_adj(::X509_getm_notBefore(x), 0);
  ::X509_gmtime_adj(::X509_getm_notAfter(x), 3600);
  ::X509_set_pubkey(x, key.get());
  auto* name = ::X509_get_subject_name(x);
  ::X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("scale"), -1, -1, 0);
  ::X509_set_issuer_name(x, name);
  if (::X509_sign(x, key.get(), ::EVP_sha256()) <= 0) throw std::runtime_error("--tls: cannot sign: " + ssl_errors());
  ssl_ctx_ptr server{::SSL_CTX_new(::TLS_server_method())}, client{::SSL_CTX_new(::TLS_client_method())};
  if (!server || !client || ::SSL_CTX_use_certificate(server.get(), x) != 1 ||
      ::SSL_CTX_use_PrivateKey(server.get(), key.get()) != 1)
    throw std::runtime_error("--tls: cannot make a TLS context: " + ssl_errors());
  for (auto* c : {server.get(), client.get()}) {
    ::SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
    // ActorTrain's sessions (actors/src/net/tls.cpp) read ahead into 256 KiB.
    ::SSL_CTX_set_read_ahead(c, 1);
    ::SSL_CTX_set_default_read_buffer_len(c, 256 * 1024);
    ::SSL_CTX_set_num_tickets(c, 0);  // nothing but the stream after the handshake, as theirs
  }
  return {std::move(server), std::move(client)};
}

// Keeps the calling thread on `cpu` (if it cannot, it runs where the kernel puts it).
void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

// One pass: process CPU seconds per byte at each end of 128 MiB from one thread to
// another over TCP (inside TLS when `tls` is given), both threads on one core.
double stream_once(const netns_pair* ns, const std::pair<ssl_ctx_ptr, ssl_ctx_ptr>* tls) {
  const int cpu = ::sched_getcpu();
  std::promise<uint16_t> port_promise;
  auto port = port_promise.get_future();
  std::exception_ptr rx_failed, tx_failed;
  const std::string host = ns ? ns->server_ip() : "127.0.0.1";
  const double c0 = process_cpu_seconds();
  std::thread rx([&] {
    bool told = false;
    pin_to(cpu);
    try {
      if (ns) enter_netns(ns->server());
      auto lst = net::listen_on(host, 0);
      port_promise.set_value(net::local_port(lst.get()));
      told = true;
      auto in = net::accept_within(lst.get(), 10s);
      net::set_receive_timeout(in.get(), 30s);
      net::set_send_timeout(in.get(), 30s);
      std::vector<char> buf(chunk);
      if (tls) {
        ssl_ptr s{::SSL_new(tls->first.get())};
        if (!s || ::SSL_set_fd(s.get(), in.get()) != 1 || ::SSL_accept(s.get()) != 1)
          throw std::runtime_error("--tls: the measurement's handshake failed: " + ssl_errors());
        for (size_t got = 0, n = 0; got < chunk * chunks; got += n)
          if (::SSL_read_ex(s.get(), buf.data(), buf.size(), &n) != 1)
            throw std::runtime_error("--tls: the measurement's connection broke: " + ssl_errors());
      } else {
        for (size_t i = 0; i < chunks; ++i)
          if (!net::read_exact(in.get(), buf.data(), chunk)) throw std::runtime_error("--tcp: the measurement's connection broke");
      }
      // All read: the writer may close (had it closed earlier with bytes unread at its
      // end, its kernel would reset the connection and drop what was still on the way).
      net::write_exact(in.get(), "k", 1);
    } catch (...) {
      rx_failed = std::current_exception();
      if (!told) port_promise.set_exception(std::current_exception());
    }
  });
  auto send_side = [&] {
    pin_to(cpu);
    try {
      if (ns) enter_netns(ns->client());
      auto out = net::connect_to(host, port.get(), 10s);
      net::set_receive_timeout(out.get(), 30s);
      net::set_send_timeout(out.get(), 30s);
      std::vector<char> src(chunk, 0x5a);
      if (tls) {
        ssl_ptr s{::SSL_new(tls->second.get())};
        if (!s || ::SSL_set_fd(s.get(), out.get()) != 1 || ::SSL_connect(s.get()) != 1)
          throw std::runtime_error("--tls: the measurement's handshake failed: " + ssl_errors());
        for (size_t i = 0; i < chunks; ++i) {
          size_t n = 0;
          if (::SSL_write_ex(s.get(), src.data(), src.size(), &n) != 1 || n != src.size())
            throw std::runtime_error("--tls: the measurement's connection broke: " + ssl_errors());
        }
      } else {
        for (size_t i = 0; i < chunks; ++i) net::write_exact(out.get(), src.data(), chunk);
      }
      char done = 0;
      if (!net::read_exact(out.get(), &done, 1)) throw std::runtime_error("the measurement's connection broke");
    } catch (...) {
      tx_failed = std::current_exception();
    }
  };
  std::thread tx;
  try {
    tx = std::thread(send_side);
  } catch (...) {
    rx.join();  // it gives up waiting for a connection within 10 s
    throw;
  }
  rx.join();
  tx.join();
  if (rx_failed) std::rethrow_exception(rx_failed);
  if (tx_failed) std::rethrow_exception(tx_failed);
  return (process_cpu_seconds() - c0) / static_cast<double>(chunk * chunks) / 2;
}

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// A memcpy's CPU seconds per byte (what shared memory costs at each end instead), in
// CPU time as the streams are, so that a busy machine does not inflate it.
double memcpy_once() {
  std::vector<char> src(chunk, 0x5a), dst(chunk);
  const double t0 = thread_cpu_seconds();
  for (size_t i = 0; i < chunks; ++i) {
    std::memcpy(dst.data(), src.data(), chunk);
    src[i % chunk] = dst[(i * 7) % chunk];  // keep the copies
  }
  return (thread_cpu_seconds() - t0) / static_cast<double>(chunk * chunks);
}

}  // namespace

transport_costs measure_transport_costs(bool tcp, bool tls, bool across_namespaces) {
  transport_costs out;
  if (!tcp && !tls) return out;
  // A side that fails closes its socket: the other's next write must fail, not kill the
  // process (and leave the namespaces behind).
  net::ignore_sigpipe();
  std::optional<netns_pair> ns;
  if (across_namespaces) try {
      ns.emplace("scale", true);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("--netns: ") + e.what());
    }
  std::optional<std::pair<ssl_ctx_ptr, ssl_ctx_ptr>> contexts;
  if (tls) contexts = tls_contexts();
  // Passes alternated, so that the machine's drift falls on each alike.
  std::vector<double> plain, secured, copy;
  for (int pass = 0; pass < 9; ++pass) {
    plain.push_back(stream_once(ns ? &*ns : nullptr, nullptr));
    if (tls) secured.push_back(stream_once(ns ? &*ns : nullptr, &*contexts));
    if (tcp) copy.push_back(memcpy_once());
  }
  const double p = median(plain);
  if (tcp) out.tcp = std::max(0.0, p - median(copy));
  if (tls) out.tls = std::max(0.0, median(secured) - p);
  return out;
}

}  // namespace actortrain::tools
