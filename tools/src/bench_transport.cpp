// actortrain bench transport: the tensor data plane between two processes on 127.0.0.1.
//
// The bench re-executes itself (/proc/self/exe ... --serve-fd FD, internal) as the ps
// side, so every figure crosses a real process boundary. The ps side listens on two
// loopback ports (both picked by the kernel, reported back over a pipe):
//   raw TCP    — one blocking TCP_NODELAY socket: a 16-byte header {up, down}, then `up`
//                bytes in; it answers `down` bytes: the floor for moving these bytes.
//   actortrain — an event-based actor published over CAF's BASP that answers
//                (push_atom, push_request) with a push_reply (nothing applied) and
//                (pull_atom, pull_request) with a prebuilt partition, shared, so the
//                figure is transport: serialization, BASP, sockets, scheduling.
// One dense round is a push of N bytes (one dense_slice) and then a pull of N bytes (one
// partition_value); raw rounds send N and receive N. Rounds are interleaved (raw,
// actortrain, raw, ...) after a few warm-up rounds, and medians are compared, since the
// machine is shared and noisy. A sparse round is one pull_rows_request of --sparse-rows
// int64 ids answered by a rows_reply (the ids and a rows x 1 tensor); its raw baseline
// moves the same byte counts as the serialized request and reply.
//
// With --tls the bench then measures the dense sizes again over mutual TLS, against a
// second ps side (--serve-tls DIR, internal) started once the plain one has exited: a
// raw OpenSSL socket pair (libssl, blocking, TCP_NODELAY, the same round) beside
// ActorTrain's BASP as a TLS cluster's tasks run it: the ps side listens behind the BASP
// guard, which runs the TLS server and relays the plaintext to CAF, and the bench dials as
// a task does, through its outbound guard (transport.hpp). The certificates (a CA and one node certificate
// both sides share, as tools/make-certs makes them) come from the openssl command in a
// temporary directory that the bench removes when it ends.
//
// Lifetimes: the ps side exits when the raw connection closes (the bench closes it when
// done, the kernel when the bench dies; PR_SET_PDEATHSIG backs this up), or after an
// idle bound; the bench waits a bounded time for it and then sends SIGKILL.

#include "bench.hpp"
#include "flags.hpp"
#include "netns.hpp"
#include "openssl_handles.hpp"

#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/net/data_plane.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/actors/net/sockets.hpp>
#include <actortrain/actors/net/transport.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>
#include <actortrain/model/optim/adam.hpp>
#include <actortrain/model/optim/sgd.hpp>
#include <actortrain/model/random.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace actortrain::tools {

namespace {

using std::chrono::steady_clock;

// Every request and every socket operation ends within this: a wedged peer ends the
// bench with a message instead of hanging it.
constexpr auto request_timeout = std::chrono::seconds(30);
// The ps side gives up when the bench neither connects nor sends for this long (the
// bench sends nothing on the raw socket while it measures a sparse actortrain round).
constexpr auto idle_bound = std::chrono::seconds(120);
// How long the bench waits for the ps side to exit by itself before SIGKILL.
constexpr auto exit_bound = std::chrono::seconds(10);
constexpr int warmup_rounds = 3;
constexpr int64_t max_dense_bytes = int64_t{1} << 28;  // 256 MiB a message
constexpr int64_t max_sparse_rows = int64_t{1} << 24;  // 200 MB a reply
constexpr int64_t goal_bytes = 4 << 20;
constexpr double goal_ratio = 1.2;
constexpr double tls_goal_ratio = 1.3;  // the data plane inside TLS, against raw TLS
// Where the ps side listens: 127.0.0.1, or with --netns its namespace's address.
std::string host = "127.0.0.1";

struct transport_options {
  int rounds = 30;
  std::string sizes_text = "4096,262144,4194304";
  std::vector<int64_t> sizes;  // bytes, each a multiple of sizeof(float)
  int64_t sparse_rows = 1000000;
  bool tls = false;       // --tls: a TLS section after the plain ones
  bool netns = false;     // --netns: the two sides in two network namespaces on a veth pair
  std::string serve_tls;  // internal, the ps side: serve over TLS with the certificates here
  std::string serve_netns;  // internal, the ps side: enter this namespace first
  std::string serve_host;   // internal, the ps side: listen here
  // internal, the ps side: a real ps shard whose table keyed by id holds this many ids
  // (bench sparse --processes), instead of the stand-in.
  int64_t serve_table = 0;
  int table_dim = 16;
  std::string table_optimizer = "adam";
};

double ms_since(steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(steady_clock::now() - start).count();
}

// -- sockets (the library's helpers, net/sockets.hpp) -------------------------------

[[noreturn]] void fail_errno(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

using net::unique_fd;

// TCP_NODELAY, and no read or write that waits longer than `timeout`.
void tune_socket(int fd, std::chrono::milliseconds timeout) {
  net::set_no_delay(fd);
  net::set_receive_timeout(fd, timeout);
  net::set_send_timeout(fd, timeout);
}

// -- TLS ----------------------------------------------------------------------------

// The certificate, key and CA both sides load (one node certificate they share).
struct tls_files {
  std::string certificate, key, ca;
};

tls_files tls_files_in(const std::string& dir) { return {dir + "/node.pem", dir + "/node.key", dir + "/ca.pem"}; }

void check_tls_files(const tls_files& f) {
  for (const auto* path : {&f.certificate, &f.key, &f.ca})
    if (!std::filesystem::is_regular_file(*path)) throw std::runtime_error("TLS file missing: " + *path);
}

// A TLS cluster of these files, as the two sides' transport (transport.hpp) sees it.
cluster_def tls_cluster(const tls_files& f) {
  cluster_def def;
  def.tls = actortrain::tls_files{f.certificate, f.key, f.ca};
  return def;
}

// The largest BASP message of the bench: a push or pull of the largest dense size.
uint64_t max_message(const transport_options& o) {
  auto max_dense = static_cast<uint64_t>(*std::max_element(o.sizes.begin(), o.sizes.end()));
  return std::max<uint64_t>(uint64_t{64} << 20, 2 * max_dense + (uint64_t{16} << 20));
}

// libssl writes with write(2), not send(MSG_NOSIGNAL): a vanished peer must be an error
// to report, not a SIGPIPE that kills the process. Only the TLS paths call this.
void ignore_sigpipe() { net::ignore_sigpipe(); }

// Mutual authentication as a TLS cluster does it: certificate + key + CA, the peer must
// present a certificate chained to the CA (no host name check).
ssl_ctx_ptr make_ssl_ctx(bool server, const tls_files& f) {
  ::ERR_clear_error();
  ssl_ctx_ptr ctx{::SSL_CTX_new(server ? ::TLS_server_method() : ::TLS_client_method())};
  if (!ctx) throw std::runtime_error("SSL_CTX_new: " + ssl_errors());
  if (::SSL_CTX_use_certificate_chain_file(ctx.get(), f.certificate.c_str()) != 1 ||
      ::SSL_CTX_use_PrivateKey_file(ctx.get(), f.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      ::SSL_CTX_check_private_key(ctx.get()) != 1 ||
      ::SSL_CTX_load_verify_locations(ctx.get(), f.ca.c_str(), nullptr) != 1)
    throw std::runtime_error("loading the TLS certificate, key and CA: " + ssl_errors());
  ::SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  ::SSL_CTX_set_mode(ctx.get(), SSL_MODE_AUTO_RETRY);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A peer that closes without close_notify (a killed bench) ends the session cleanly.
  ::SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  return ctx;
}

// One TLS session over a connected, tuned (timeouts, TCP_NODELAY) blocking socket.
class tls_stream {
 public:
  tls_stream(SSL_CTX* ctx, unique_fd fd, bool server) : fd_(std::move(fd)) {
    ssl_.reset(::SSL_new(ctx));
    if (!ssl_ || ::SSL_set_fd(ssl_.get(), fd_.get()) != 1) throw std::runtime_error("SSL_new: " + ssl_errors());
    ::ERR_clear_error();
    int r = server ? ::SSL_accept(ssl_.get()) : ::SSL_connect(ssl_.get());
    if (r != 1) throw std::runtime_error(fmt::format("TLS handshake: {}", error_text(r)));
  }
  tls_stream(const tls_stream&) = delete;
  tls_stream& operator=(const tls_stream&) = delete;
  ~tls_stream() { close(); }

  void close() {
    if (ssl_) {
      ::SSL_shutdown(ssl_.get());  // close_notify; the answer is not awaited
      ssl_.reset();
    }
    fd_.reset();
  }

  std::string session() const {
    return fmt::format("{} {}", ::SSL_get_version(ssl_.get()), ::SSL_get_cipher_name(ssl_.get()));
  }

  void write_all(const char* p, size_t n) {
    while (n > 0) {
      ::ERR_clear_error();
      int k = ::SSL_write(ssl_.get(), p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
      if (k <= 0) throw std::runtime_error("SSL_write: " + error_text(k));
      p += k;
      n -= static_cast<size_t>(k);
    }
  }

  // Reads exactly `n` bytes. False when the peer ended the session before the first one.
  bool read_all(char* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      ::ERR_clear_error();
      int k = ::SSL_read(ssl_.get(), p + got, static_cast<int>(std::min<size_t>(n - got, 1 << 30)));
      if (k <= 0) {
        if (got == 0 && ::SSL_get_error(ssl_.get(), k) == SSL_ERROR_ZERO_RETURN) return false;
        throw std::runtime_error(fmt::format("SSL_read{}: {}", got == 0 ? "" : " mid-message", error_text(k)));
      }
      got += static_cast<size_t>(k);
    }
    return true;
  }

 private:
  std::string error_text(int ret) {
    int saved = errno;
    switch (::SSL_get_error(ssl_.get(), ret)) {
      case SSL_ERROR_ZERO_RETURN: return "the peer closed the TLS session";
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE: return "nothing moved within the timeout";
      case SSL_ERROR_SYSCALL: return saved != 0 ? std::strerror(saved) : "the peer closed the connection";
      default: return ssl_errors();
    }
  }

  unique_fd fd_;
  ssl_ptr ssl_;
};

// A temporary directory with a CA and one node certificate, made with the openssl
// command exactly as tools/make-certs makes them; removed with everything in it.
class temp_certs {
 public:
  temp_certs() {
    run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ca.key -out ca.pem"
        " -subj /CN=actortrain-bench-transport-ca");
    run("openssl req -newkey rsa:2048 -nodes -keyout node.key -out node.csr -subj /CN=node");
    run("openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out node.pem");
    check_tls_files(tls_files_in(dir()));
  }
  const std::string& dir() const { return dir_.path; }

 private:
  struct removed_dir {
    std::string path;
    removed_dir() {
      auto t = (std::filesystem::temp_directory_path() / "actortrain-bench-tls-XXXXXX").string();
      if (!::mkdtemp(t.data())) fail_errno("mkdtemp");  // mode 0700
      path = t;
    }
    ~removed_dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };

  void run(const std::string& cmd) {
    auto log = dir() + "/openssl.log";
    auto line = fmt::format("cd '{}' && umask 077 && {} </dev/null >>openssl.log 2>&1", dir(), cmd);
    int r = std::system(line.c_str());
    if (r != 0) {
      std::ifstream in{log};
      std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      auto how = WIFEXITED(r) ? fmt::format("exit status {}", WEXITSTATUS(r)) : fmt::format("status {}", r);
      throw std::runtime_error(fmt::format("making the TLS certificates: `{}` failed ({}){}{}", cmd, how,
                                           text.empty() ? "" : ": ", text));
    }
  }

  removed_dir dir_;
};

// What a raw round announces before its payload.
struct raw_header {
  uint64_t up = 0;    // bytes following this header
  uint64_t down = 0;  // bytes to answer with
};

// -- the ps side --------------------------------------------------------------------

// What the ps side answers pulls with, built once: a pull shares these, so no round
// rebuilds or copies a tensor.
struct served_tensors {
  std::vector<tensor> dense;  // by index into --sizes
  tensor sparse;              // sparse_rows x 1
};

std::shared_ptr<const served_tensors> make_served_tensors(const transport_options& o) {
  auto s = std::make_shared<served_tensors>();
  for (auto bytes : o.sizes) s->dense.emplace_back(model::matrix::Constant(bytes / 4, 1, 0.5f));
  if (o.sparse_rows > 0) s->sparse = tensor{model::matrix::Constant(o.sparse_rows, 1, 0.25f)};
  return s;
}

caf::error bad_request(const std::string& what) { return caf::make_error(caf::sec::invalid_argument, what); }

// The bench's stand-in for a ps shard: answers like one, applies and gathers nothing.
caf::behavior transport_ps(caf::event_based_actor*, std::shared_ptr<const served_tensors> served) {
  return {
    [](push_atom, const push_request&) { return push_reply{}; },
    [served](pull_atom, const pull_request& req) -> caf::result<pull_reply> {
      if (req.partitions.size() != 1) return bad_request("pull one partition");
      auto i = req.partitions[0].index;
      if (i < 0 || static_cast<size_t>(i) >= served->dense.size()) return bad_request("no such partition");
      pull_reply r;
      r.values.push_back(partition_value{req.partitions[0], 0, served->dense[static_cast<size_t>(i)]});
      return r;
    },
    // The bench asks for every row in order (ids 0..rows-1), so the prebuilt partition
    // is the exact gather; the ids go back moved, as a shard sends them back.
    [served](pull_rows_atom, pull_rows_request& req) -> caf::result<rows_reply> {
      if (static_cast<int64_t>(req.ids.size()) != served->sparse.rows()) return bad_request("pull every row");
      return rows_reply{req.variable, 0, std::move(req.ids), served->sparse};
    },
  };
}

// Answers raw rounds until the bench closes the connection.
void serve_raw(int fd) {
  tune_socket(fd, idle_bound);
  std::vector<char> buf;
  for (raw_header h; net::read_exact(fd, &h, sizeof h);) {
    auto limit = static_cast<uint64_t>(max_dense_bytes) + static_cast<uint64_t>(max_sparse_rows) * 12;
    if (h.up > limit || h.down > limit) throw std::runtime_error("raw round larger than any the bench sends");
    buf.resize(std::max(h.up, h.down));
    if (!net::read_exact(fd, buf.data(), h.up)) throw std::runtime_error("the bench closed the connection mid-round");
    net::write_exact(fd, buf.data(), h.down);
  }
}

// The same rounds over a TLS session.
void serve_raw_tls(tls_stream& s) {
  std::vector<char> buf;
  for (raw_header h; s.read_all(reinterpret_cast<char*>(&h), sizeof h);) {
    if (h.up > static_cast<uint64_t>(max_dense_bytes) || h.down > static_cast<uint64_t>(max_dense_bytes))
      throw std::runtime_error("raw TLS round larger than any the bench sends");
    buf.resize(std::max(h.up, h.down));
    if (!s.read_all(buf.data(), h.up)) throw std::runtime_error("the bench closed the TLS session mid-round");
    s.write_all(buf.data(), h.down);
  }
}

void report_ports(int fd, uint16_t raw, uint16_t basp, const data_plane::endpoint& plane) {
  auto line = fmt::format("{} {} {} {}\n", raw, basp, plane.port, plane.token.empty() ? "-" : plane.token);
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) fail_errno("reporting the ports");
  ::close(fd);
}

// Sends the actor an exit on scope end: ~actor_system waits for every live actor, so
// an error between spawn and the normal end must not leave this one running.
struct exit_at_scope_end {
  caf::actor a;
  ~exit_at_scope_end() { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); }
};

void configure_system(caf::actor_system_config& cfg) {
  configure(cfg, {/*load_middleman=*/true});
  cfg.set("scheduler.max-threads", 2);  // this machine's cores (the default is at least 4)
}

// -- the ps side of bench sparse --processes: a real shard ---------------------------

constexpr uint64_t table_seed = 5;
constexpr int64_t fill_chunk = 1 << 20;  // ids per push while the table fills

// The one variable of the table bench: a table keyed by id, `dim` wide.
model::variable_spec table_variable(int dim) {
  return model::variable_spec{"emb/table", {0, dim}, model::uniform(-0.05f, 0.05f), /*sparse=*/true, /*dynamic=*/true};
}

std::unique_ptr<model::optimizer> table_optimizer(const std::string& name) {
  if (name == "adam") return model::make_adam({0.001});
  if (name == "sgd") return model::make_sgd({0.01});
  throw usage_error(fmt::format("--table-optimizer: '{}' is not adam or sgd", name));
}

// The epochs the bench's requests carry (the shard's init takes them), as worker 0.
fence table_fence() {
  fence f;
  f.coordinator_epoch = 1;
  f.worker = 0;
  return f;
}

// Pushes `ids` (sorted, unique) with a constant gradient as step `position`.
push_request table_push(std::vector<int64_t> ids, int dim, uint64_t position, float g) {
  push_request r;
  r.f = table_fence();
  r.step = step_id{1, 0, position};
  r.example_count = 1;
  r.digests = {position};
  sparse_slice s;
  s.variable = 0;
  s.rows = tensor{model::matrix::Constant(static_cast<Eigen::Index>(ids.size()), dim, g)};
  s.ids = std::move(ids);
  r.sparse.push_back(std::move(s));
  return r;
}

// Spawns the shard, gives it its one partition (the whole table), and fills the table
// with scattered_id(0..n) by pushes of zero gradients (rows at their initial values).
caf::actor make_table_shard(caf::actor_system& sys, const transport_options& o) {
  auto opt = table_optimizer(o.table_optimizer);
  ps_shard_options so;
  so.detached = true;  // as a ps task runs it
  so.variables = {table_variable(o.table_dim)};
  auto shard = caf::actor_cast<caf::actor>(spawn_ps_shard(sys, *opt, so));
  caf::scoped_actor self{sys};
  std::string error;
  auto check = [&](const char* what) {
    if (error.empty()) return;
    caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);  // else ~actor_system waits for it
    throw std::runtime_error(fmt::format("the table shard refused {}: {}", what, error));
  };
  init_request init;
  init.f = table_fence();
  init.f.worker = fence::no_worker;
  partition_state p;
  p.key = partition_key{0, 0};
  p.name = "emb/table";
  p.sparse = true;
  p.dynamic = true;
  p.partitions = 1;
  p.seed = table_seed;
  p.value = tensor{model::matrix(0, o.table_dim)};
  init.partitions.push_back(std::move(p));
  self->request(shard, request_timeout, init_atom::value, std::move(init))
    .receive([](caf::ok_atom) {}, [&](caf::error& e) { error = describe(e); });
  check("its init");
  uint64_t position = 0;
  for (int64_t begin = 0; begin < o.serve_table; begin += fill_chunk) {
    std::vector<int64_t> ids;
    for (int64_t v = begin; v < std::min(o.serve_table, begin + fill_chunk); ++v) ids.push_back(scattered_id(v));
    std::sort(ids.begin(), ids.end());
    self->request(shard, request_timeout, push_atom::value, table_push(std::move(ids), o.table_dim, position++, 0.0f))
      .receive([](const push_reply&) {}, [&](caf::error& e) { error = describe(e); });
    check("a push");
  }
  return shard;
}

int serve_or_throw(const transport_options& o, int report_fd) {
  auto served = make_served_tensors(o);
  bool tls = !o.serve_tls.empty();
  caf::actor_system_config cfg;
  ssl_ctx_ptr ctx;
  if (tls) {
    ignore_sigpipe();
    auto f = tls_files_in(o.serve_tls);
    check_tls_files(f);
    ctx = make_ssl_ctx(/*server=*/true, f);
    configure_transport(cfg, tls_cluster(f), 2, max_message(o));
  } else {
    configure_system(cfg);
  }
  caf::actor_system sys{cfg};
  caf::actor shard = o.serve_table > 0 ? make_table_shard(sys, o) : sys.spawn(transport_ps, served);
  // However this ends (served, or an error thrown), the shard stops and is forgotten in
  // the registry, where its handle's trip to the bench put it (else ~actor_system waits
  // for its detached thread for as long as the bench holds a proxy of it: a third of the
  // runs hung until the bench's SIGKILL). Declared here, it runs after the data plane and
  // the listeners below are gone.
  struct stopped_at_scope_end {
    caf::actor_system& sys;
    caf::actor shard;
    ~stopped_at_scope_end() { stop_and_forget(sys, shard, std::chrono::seconds(2)); }
  } stopped{sys, shard};
  // TLS: behind the guard, as a task listens. Plain: CAF's own publish (BASP alone).
  std::optional<guarded_listener> guarded;
  caf::expected<uint16_t> basp{uint16_t{0}};
  if (tls)
    basp = guarded.emplace(sys, caf::actor_cast<caf::strong_actor_ptr>(shard), tls_cluster(tls_files_in(o.serve_tls)), host, 0, max_message(o),
                           [](const std::string& line) { fmt::print(stderr, "ps side: {}\n", line); })
             .port();
  else
    basp = sys.middleman().publish(shard, 0, host.c_str(), /*reuse_addr=*/true);
  if (!basp) throw std::runtime_error(fmt::format("publish on 127.0.0.1: {}", describe(basp.error())));
  // The tensor data plane beside BASP, as in a cluster: with TLS a TLS server too.
  std::optional<data_plane::server> plane;
  data_plane::server::limits limits;
  limits.listen_host = host;
  if (tls) {
    auto f = tls_files_in(o.serve_tls);
    limits.tls = data_plane::tls_context(f.certificate, f.key, f.ca);
  }
  plane.emplace(sys, caf::actor_cast<ps_shard_actor>(shard),
                std::chrono::duration_cast<std::chrono::milliseconds>(request_timeout), limits);
  auto listener = net::listen_on(host, 0, {/*backlog=*/1});
  report_ports(report_fd, net::local_port(listener.get()), *basp, plane->where());
  auto conn = net::accept_within(listener.get(), idle_bound);
  if (!tls) {
    serve_raw(conn.get());
  } else {
    tune_socket(conn.get(), idle_bound);
    tls_stream session{ctx.get(), std::move(conn), /*server=*/true};
    serve_raw_tls(session);
  }
  return 0;
}

// The ps side's errors reach the bench's stderr: say whose they are.
int serve(const transport_options& o, int report_fd) {
  try {
    return serve_or_throw(o, report_fd);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string{"bench transport, ps side: "} + e.what());
  }
}

// -- the bench side: the ps process -------------------------------------------------

class ps_process {
 public:
  // Starts the ps side and waits (bounded) for the ports it listens on.
  ps_process(const char* argv0, const transport_options& o) {
    start(argv0, o);
  }

  ps_process(const ps_process&) = delete;
  ps_process& operator=(const ps_process&) = delete;
  // On an error path: the ps side must not outlive the bench, and how it ended helps.
  ~ps_process() {
    if (pid_ <= 0) return;
    if (auto how = finish(); !how.empty()) fmt::print(stderr, "actortrain bench transport: the ps side {}\n", how);
  }

 private:
  void start(const char* argv0, const transport_options& o) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) fail_errno("pipe");
    unique_fd rd{fds[0]}, wr{fds[1]};
    // Built before fork: the child only calls async-signal-safe functions until exec.
    std::vector<std::string> args{argv0,           "bench",        "transport",
                                  "--serve-fd",    std::to_string(wr.get()),
                                  "--sizes",       o.sizes_text,   "--sparse-rows",
                                  std::to_string(o.sparse_rows)};
    if (!o.serve_tls.empty()) {
      args.push_back("--serve-tls");
      args.push_back(o.serve_tls);
    }
    if (!o.serve_netns.empty()) {
      args.insert(args.end(), {"--serve-netns", o.serve_netns, "--serve-host", o.serve_host});
    }
    if (o.serve_table > 0)
      args.insert(args.end(), {"--serve-table", std::to_string(o.serve_table), "--table-dim",
                               std::to_string(o.table_dim), "--table-optimizer", o.table_optimizer});
    // A table is filled before the ports are reported: about 1 s a million ids here.
    report_bound_ = request_timeout + std::chrono::seconds(2 * (o.serve_table >> 20));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) fail_errno("fork");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the bench
      ::fcntl(wr.get(), F_SETFD, 0);       // the report pipe survives exec
      ::execv("/proc/self/exe", argv.data());
      ::_exit(127);
    }
    wr.reset();
    read_ports(rd.get());
  }

 public:
  pid_t pid() const { return pid_; }
  uint16_t raw_port() const { return raw_port_; }
  uint16_t basp_port() const { return basp_port_; }
  /// The ps side's data plane (a TLS server too with --serve-tls).
  const data_plane::endpoint& plane() const { return plane_; }

  // Waits up to exit_bound for the ps side to exit by itself, then kills it; returns
  // a description of how it ended ("" = exited with status 0).
  std::string finish() {
    int status = 0;
    auto deadline = steady_clock::now() + exit_bound;
    pid_t r = 0;
    while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 && steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::string how;
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      how = fmt::format("did not exit within {} s and was killed", exit_bound.count());
    } else if (WIFSIGNALED(status)) {
      how = fmt::format("was killed by signal {}", WTERMSIG(status));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      how = fmt::format("exited with status {}", WEXITSTATUS(status));
    }
    pid_ = -1;
    return how;
  }

 private:
  void read_ports(int fd) {
    std::string line;
    auto deadline = steady_clock::now() + report_bound_;
    while (line.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      int r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw std::runtime_error(fmt::format("the ps side did not report its ports within {} s", report_bound_.count()));
      char tmp[64];
      auto n = ::read(fd, tmp, sizeof tmp);
      if (n <= 0) throw std::runtime_error("the ps side " + finish() + " before reporting its ports");
      line.append(tmp, static_cast<size_t>(n));
    }
    unsigned raw = 0, basp = 0, plane = 0;
    char token[64] = {};
    if (std::sscanf(line.c_str(), "%u %u %u %63s", &raw, &basp, &plane, token) != 4 || raw == 0 || basp == 0 ||
        raw > 65535 || basp > 65535 || plane > 65535)
      throw std::runtime_error("the ps side reported '" + line + "' instead of three ports and a token");
    raw_port_ = static_cast<uint16_t>(raw);
    basp_port_ = static_cast<uint16_t>(basp);
    plane_.port = static_cast<uint16_t>(plane);
    plane_.token = token;
    plane_.host = host;
  }

  pid_t pid_ = -1;
  uint16_t raw_port_ = 0, basp_port_ = 0;
  data_plane::endpoint plane_;
  std::chrono::seconds report_bound_ = request_timeout;
};

// -- the bench side: raw TCP --------------------------------------------------------

class raw_client {
 public:
  raw_client(uint16_t port, size_t max_up, size_t max_down)
    : fd_(net::connect_to(host, port, request_timeout)), out_(sizeof(raw_header) + max_up, 1), in_(max_down, 0) {
    tune_socket(fd_.get(), request_timeout);
  }

  // One round: `up` bytes out, `down` bytes back; the header rides in the same send.
  double round_ms(uint64_t up, uint64_t down) {
    raw_header h{up, down};
    auto start = steady_clock::now();
    std::memcpy(out_.data(), &h, sizeof h);
    net::write_exact(fd_.get(), out_.data(), sizeof h + up);
    if (!net::read_exact(fd_.get(), in_.data(), down)) throw std::runtime_error("the ps side closed the raw connection");
    return ms_since(start);
  }

  void close() { fd_.reset(); }

 private:
  unique_fd fd_;
  std::vector<char> out_, in_;
};

// -- the bench side: raw TLS --------------------------------------------------------

class tls_client {
 public:
  tls_client(uint16_t port, const tls_files& f, size_t max_up, size_t max_down)
    : ctx_(make_ssl_ctx(/*server=*/false, f)), out_(sizeof(raw_header) + max_up, 1), in_(max_down, 0) {
    auto fd = net::connect_to(host, port, request_timeout);
    tune_socket(fd.get(), request_timeout);
    auto start = steady_clock::now();
    stream_.emplace(ctx_.get(), std::move(fd), /*server=*/false);
    handshake_ms_ = ms_since(start);
  }

  double handshake_ms() const { return handshake_ms_; }
  std::string session() const { return stream_->session(); }

  // One round, as raw_client's: `up` bytes out (header in the same write), `down` back.
  double round_ms(uint64_t up, uint64_t down) {
    raw_header h{up, down};
    auto start = steady_clock::now();
    std::memcpy(out_.data(), &h, sizeof h);
    stream_->write_all(out_.data(), sizeof h + up);
    if (!stream_->read_all(in_.data(), down)) throw std::runtime_error("the ps side closed the TLS session");
    return ms_since(start);
  }

  void close() { stream_.reset(); }

 private:
  ssl_ctx_ptr ctx_;
  std::optional<tls_stream> stream_;
  std::vector<char> out_, in_;
  double handshake_ms_ = 0;
};

// -- the bench side: actortrain over BASP -------------------------------------------

// What an actor reports back to the bench's thread: a time or what went wrong.
struct outcome {
  double ms = 0;
  std::string error;  // "" = fine
};

using report_fn = std::function<void(outcome)>;

outcome failed(const std::string& what, const caf::error& e) { return {0, what + ": " + describe(e)}; }

// Runs `start` in a fresh event-based actor (requests are best made from one: see
// the CAF notes on scoped_actor's stale timeouts) and waits for what it reports.
outcome in_actor(caf::actor_system& sys, std::function<void(caf::event_based_actor*, report_fn)> start) {
  auto promise = std::make_shared<std::promise<outcome>>();
  auto result = promise->get_future();
  sys.spawn([start, promise](caf::event_based_actor* self) {
    start(self, [self, promise](outcome o) {
      promise->set_value(std::move(o));
      self->quit();
    });
  });
  // The actor's requests time out first; this only guards against a lost report.
  if (result.wait_for(3 * request_timeout) != std::future_status::ready)
    return {0, "no outcome from the measuring actor"};
  return result.get();
}

using dense_round_atom = caf::atom_constant<caf::atom("dround")>;
using sparse_round_atom = caf::atom_constant<caf::atom("sround")>;
using push_round_atom = caf::atom_constant<caf::atom("pround")>;

// Answers a round request once: with (ms, "") or (0, what went wrong).
struct round_reply_to {
  caf::response_promise rp;
  steady_clock::time_point start = steady_clock::now();
  bool answered = false;
  void done() { answer(ms_since(start), ""); }
  void fail(const std::string& what) { answer(0.0, what); }
  void fail(const std::string& what, const caf::error& e) { fail(what + ": " + describe(e)); }
  void answer(double ms, const std::string& error) {
    if (answered) return;  // a late timeout after the down handler answered
    answered = true;
    rp.deliver(ms, error);
  }
};

struct runner_state {
  std::shared_ptr<round_reply_to> pending;  // the round in flight
  std::string lost;                         // why the ps side went away ("" = it is there)
};

// The bench's worker: one long-lived actor runs every actortrain round and times it,
// as a worker talks to its ps for a whole job. A fresh actor per round would make the
// ps side's node create, announce and later drop a proxy for each one: BASP traffic
// inside the timed window that a real worker does not pay. It monitors the ps side:
// BASP never fails a pending request when the peer dies, so without this a dead ps
// side would cost a full request timeout. With a data plane, the requests go to its
// stand-in `via` (which carries them to the same actor) instead.
caf::behavior round_runner(caf::event_based_actor* self, caf::actor ps, caf::actor via) {
  auto st = std::make_shared<runner_state>();
  self->monitor(ps);
  self->set_down_handler([st](caf::down_msg& dm) {
    st->lost = "the ps side went away (" + describe(dm.reason) + ")";
    if (st->pending) st->pending->fail(st->lost);
  });
  // A new round's reply handle, or null when it was answered already (ps side gone).
  auto begin = [self, st]() -> std::shared_ptr<round_reply_to> {
    auto r = std::make_shared<round_reply_to>(round_reply_to{self->make_response_promise()});
    if (!st->lost.empty()) {
      r->fail(st->lost);
      return nullptr;
    }
    st->pending = r;
    return r;
  };
  auto to = via ? via : ps;
  return {
    // The pull goes right behind the push, as a worker's next pull does: CAF keeps one
    // sender's messages in order, so the pull is served after the push. The round ends
    // when both replies are in.
    [=](dense_round_atom, const caf::message& push, const caf::message& pull, int64_t floats) {
      auto r = begin();
      if (!r) return;
      auto left = std::make_shared<int>(2);
      self->request(to, request_timeout, push)
        .then(
          [=](const push_reply&) {
            if (--*left == 0) r->done();
          },
          [=](caf::error& e) { r->fail("push", e); });
      self->request(to, request_timeout, pull)
        .then(
          [=](const pull_reply& p) {
            if (p.values.size() != 1 || p.values[0].value.rows() * p.values[0].value.cols() != floats)
              return r->fail("pull: the reply holds the wrong partition");
            if (--*left == 0) r->done();
          },
          [=](caf::error& e) { r->fail("pull", e); });
    },
    // `copies` requests at once (as that many workers pull from one shard); the round
    // ends when every reply is in.
    [=](sparse_round_atom, const caf::message& pull_rows, int64_t rows, int32_t copies) {
      auto r = begin();
      if (!r) return;
      auto left = std::make_shared<int32_t>(copies);
      for (int32_t c = 0; c < copies; ++c)
        self->request(to, request_timeout, pull_rows)
          .then(
            [=](const rows_reply& p) {
              if (static_cast<int64_t>(p.ids.size()) != rows || p.rows.rows() != rows)
                return r->fail("pull_rows: the reply holds the wrong rows");
              if (--*left == 0) r->done();
            },
            [=](caf::error& e) { r->fail("pull_rows", e); });
    },
    [=](push_round_atom, const caf::message& push) {
      auto r = begin();
      if (!r) return;
      self->request(to, request_timeout, push)
        .then([=](const push_reply&) { r->done(); }, [=](caf::error& e) { r->fail("push", e); });
    },
  };
}

// Has `runner` (a round_runner) run one round; its own requests time out within
// request_timeout. The round's time in ms.
double run_round(caf::actor_system& sys, const caf::actor& runner, caf::message round) {
  auto o = in_actor(sys, [=](caf::event_based_actor* self, report_fn done) {
    self->request(runner, 2 * request_timeout, round)
      .then([=](double ms, std::string& error) { done({ms, std::move(error)}); },
            [=](caf::error& e) { done(failed("round", e)); });
  });
  if (!o.error.empty()) throw std::runtime_error("actortrain round failed: " + o.error);
  return o.ms;
}

// A ps shard's statistics, asked of `ps` (across BASP or in this process).
ps_stats stats_of(caf::actor_system& sys, const caf::actor& ps) {
  auto out = std::make_shared<ps_stats>();
  auto o = in_actor(sys, [=](caf::event_based_actor* self, report_fn done) {
    self->request(ps, request_timeout, stats_atom::value)
      .then(
        [=](ps_stats& s) {
          *out = std::move(s);
          done({0, ""});
        },
        [=](caf::error& e) { done(failed("stats", e)); });
  });
  if (!o.error.empty()) throw std::runtime_error(o.error);
  return *out;
}

class basp_client {
 public:
  // Connects through the middleman actor with a timeout (remote_actor has none), or, as a
  // task of a cluster does (`as_task`), with dial_actor; with `plane`, the rounds then go
  // over that data plane (control stays on BASP).
  basp_client(caf::actor_system& sys, uint16_t port, const data_plane::endpoint* plane = nullptr,
              bool shared_memory = true, bool as_task = false)
      : sys_(sys) {
    auto handle = std::make_shared<caf::actor>();
    outcome o;
    if (as_task) {
      auto start = steady_clock::now();
      auto a = dial_actor(sys, task_address{host, port}, std::chrono::seconds(10));
      if (a)
        *handle = *a;
      else
        o.error = describe(a.error());
      o.ms = ms_since(start);
    } else {
      o = in_actor(sys, [port, handle](caf::event_based_actor* self, report_fn done) {
        auto start = steady_clock::now();
        auto& sys = self->system();
        auto mm = sys.middleman().actor_handle();
        self->request(mm, request_timeout, caf::connect_atom::value, std::string{host}, port)
          .then(
            [=](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) {
              if (!p) return done({0, "nothing is published there"});
              *handle = caf::actor_cast<caf::actor>(std::move(p));
              done({ms_since(start), ""});
            },
            [=](caf::error& e) { done(failed("connect", e)); });
      });
    }
    if (!o.error.empty()) throw std::runtime_error(fmt::format("connecting to {}:{}: {}", host, port, o.error));
    connect_ms_ = o.ms;
    if (plane) via_ = data_plane::open(sys, *plane, caf::actor_cast<ps_shard_actor>(*handle), nullptr, std::chrono::seconds(5), nullptr, shared_memory);
    runner_ = sys.spawn(round_runner, *handle, via_);
    ps_ = *handle;
  }

  basp_client(const basp_client&) = delete;
  basp_client& operator=(const basp_client&) = delete;
  // ~actor_system waits for live actors: the runner must go.
  ~basp_client() {
    caf::anon_send_exit(runner_, caf::exit_reason::user_shutdown);
    if (via_) caf::anon_send_exit(via_, caf::exit_reason::user_shutdown);
  }

  double connect_ms() const { return connect_ms_; }

  // Push `push`, wait for the reply, pull `pull`, wait for the reply: one dense round.
  double dense_round_ms(const caf::message& push, const caf::message& pull, int64_t floats) {
    return ask(caf::make_message(dense_round_atom::value, push, pull, floats));
  }

  double sparse_round_ms(const caf::message& pull_rows, int64_t rows, int32_t copies = 1) {
    return ask(caf::make_message(sparse_round_atom::value, pull_rows, rows, copies));
  }

  double push_round_ms(const caf::message& push) { return ask(caf::make_message(push_round_atom::value, push)); }

  /// The ps side's statistics (over BASP).
  ps_stats stats() { return stats_of(sys_, ps_); }

 private:
  double ask(caf::message round) { return run_round(sys_, runner_, std::move(round)); }

  caf::actor_system& sys_;
  caf::actor runner_;
  caf::actor via_;
  caf::actor ps_;
  double connect_ms_ = 0;
};

// -- measuring ----------------------------------------------------------------------

struct paired_medians {
  double raw_ms = 0;
  double actortrain_ms = 0;  // over BASP
  double plane_ms = 0;       // on the data plane (0: not measured)
  double tcp_plane_ms = 0;   // on the data plane without its shared memory
  double ratio() const { return actortrain_ms / raw_ms; }
  double plane_ratio() const { return plane_ms / raw_ms; }
};

// Warm-up rounds, then `rounds` interleaved turns (each runs every function, in order);
// the median of each function's times.
std::vector<double> interleave_all(int rounds, const std::vector<std::function<double()>>& fs) {
  for (int i = 0; i < warmup_rounds; ++i)
    for (auto& f : fs) f();
  std::vector<std::vector<double>> times(fs.size());
  for (int i = 0; i < rounds; ++i)
    for (size_t k = 0; k < fs.size(); ++k) times[k].push_back(fs[k]());
  std::vector<double> out;
  for (auto& t : times) out.push_back(median(t));
  return out;
}

double mb_per_s(double bytes, double ms) { return bytes / (ms * 1e3); }

std::string human_bytes(int64_t b) {
  if (b % (1 << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b % (1 << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

caf::message dense_push(int64_t bytes) {
  push_request req;
  req.example_count = 1;
  req.dense.push_back(dense_slice{partition_key{0, 0}, 0, tensor{model::matrix::Constant(bytes / 4, 1, 1.0f)}});
  return caf::make_message(push_atom::value, std::move(req));
}

caf::message dense_pull(size_t index) {
  pull_request req;
  req.partitions.push_back(partition_key{0, static_cast<int32_t>(index)});
  return caf::make_message(pull_atom::value, std::move(req));
}

// Returns the ratio at goal_bytes when that size was measured; `all` gets every size's.
// `at` talks BASP, `plane` the same actor on the data plane. Returns the data plane's
// ratio at goal_bytes when that size was measured; `all` gets every size's medians.
std::optional<double> measure_dense(const transport_options& o, raw_client& raw, basp_client& at, basp_client& plane,
                                    basp_client& tcp_plane, std::vector<paired_medians>& all) {
  fmt::print("dense: one round = push N bytes (one dense_slice) and, right behind it as a worker sends\n"
             "its next pull, pull N bytes (one partition_value); done when both replies are in;\n"
             "raw TCP: send N bytes, receive N bytes. BASP: ActorTrain's messages over CAF's BASP; data\n"
             "plane: the same messages on ActorTrain's tensor data plane (what a worker and a ps task\n"
             "use in plaintext: floats of 512 KiB and more in shared memory); TCP plane: the data plane\n"
             "with every float on its TCP stream. Medians of {} interleaved rounds after {} warm-up.\n\n",
             o.rounds, warmup_rounds);
  fmt::print("{:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}\n", "bytes", "", "raw ms", "raw MB/s",
             "BASP ms", "BASP/raw", "plane ms", "plane MB/s", "plane/raw", "TCP ms", "TCP/raw");
  std::optional<double> goal;
  for (size_t i = 0; i < o.sizes.size(); ++i) {
    auto n = o.sizes[i];
    // Prebuilt once per size: a round sends the same messages (shared, not copied).
    auto push = dense_push(n), pull = dense_pull(i);
    auto t = interleave_all(o.rounds, {[&] { return raw.round_ms(static_cast<uint64_t>(n), static_cast<uint64_t>(n)); },
                                       [&] { return at.dense_round_ms(push, pull, n / 4); },
                                       [&] { return plane.dense_round_ms(push, pull, n / 4); },
                                       [&] { return tcp_plane.dense_round_ms(push, pull, n / 4); }});
    paired_medians m{t[0], t[1], t[2], t[3]};
    auto moved = 2.0 * static_cast<double>(n);
    fmt::print("{:>10} {:>8} {:>9.3f} {:>9.1f} {:>9.3f} {:>8.2f}x {:>9.3f} {:>10.1f} {:>9.2f}x {:>9.3f} {:>8.2f}x\n", n,
               human_bytes(n), m.raw_ms, mb_per_s(moved, m.raw_ms), m.actortrain_ms, m.ratio(), m.plane_ms,
               mb_per_s(moved, m.plane_ms), m.plane_ratio(), m.tcp_plane_ms, m.tcp_plane_ms / m.raw_ms);
    std::fflush(stdout);
    if (n == goal_bytes) goal = m.plane_ratio();
    all.push_back(m);
  }
  return goal;
}

template <class T>
size_t serialized_bytes(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(x)) throw std::runtime_error("serializing: " + describe(err));
  return buf.size();
}

void measure_sparse(const transport_options& o, caf::actor_system& sys, raw_client& raw, basp_client& at,
                    basp_client& plane, basp_client& tcp_plane) {
  auto rows = o.sparse_rows;
  pull_rows_request req;
  req.variable = 1;
  req.ids.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) req.ids[static_cast<size_t>(i)] = i;
  // The raw baseline moves what BASP must: the serialized request and reply.
  auto up = serialized_bytes(sys, req);
  auto down = serialized_bytes(sys, rows_reply{req.variable, 0, req.ids, tensor{model::matrix::Zero(rows, 1)}});
  auto msg = caf::make_message(pull_rows_atom::value, std::move(req));
  fmt::print("\nsparse: one pull_rows_request of {} int64 ids against a {} x 1 float partition,\n"
             "answered by a rows_reply (ids and a {} x 1 tensor): serialized {} bytes up, {} bytes down;\n"
             "raw TCP moves the same byte counts. Medians of {} interleaved rounds after {} warm-up.\n\n",
             rows, rows, rows, up, down, o.rounds, warmup_rounds);
  auto t = interleave_all(o.rounds, {[&] { return raw.round_ms(up, down); }, [&] { return at.sparse_round_ms(msg, rows); },
                                     [&] { return plane.sparse_round_ms(msg, rows); },
                                     [&] { return tcp_plane.sparse_round_ms(msg, rows); }});
  auto moved = static_cast<double>(up + down);
  auto keys = static_cast<double>(rows);
  fmt::print("{:>12} {:>10} {:>10} {:>14} {:>8}\n", "", "ms", "MB/s", "keys/s", "/raw");
  const char* names[] = {"raw TCP", "BASP", "data plane", "TCP plane"};
  for (size_t k = 0; k < 4; ++k)
    fmt::print("{:>12} {:>10.3f} {:>10.1f} {:>14.0f} {:>7.2f}x\n", names[k], t[k], mb_per_s(moved, t[k]),
               keys / (t[k] / 1e3), t[k] / t[0]);
}

void print_goal(const std::optional<double>& ratio) {
  fmt::print("\ngoal: within {}x raw TCP at {} bytes (4 MiB): ", goal_ratio, goal_bytes);
  if (!ratio)
    fmt::print("not measured (--sizes lacks {})\n", goal_bytes);
  else
    fmt::print("data plane/raw = {:.2f}x, {}\n", *ratio, *ratio <= goal_ratio ? "met" : "NOT met");
}

// The dense sizes over TLS: raw OpenSSL vs actortrain as a TLS task, against a ps
// side of their own; `plain` holds the dense table's medians (same sizes, same order).
int measure_tls(const char* argv0, const transport_options& o, const std::string& cert_dir,
                const std::vector<paired_medians>& plain) {
  ignore_sigpipe();
  auto t = o;
  t.sparse_rows = 0;  // dense only: the ps side builds no sparse partition
  t.serve_tls = cert_dir;
  auto files = tls_files_in(cert_dir);
  auto max_dense = static_cast<size_t>(*std::max_element(o.sizes.begin(), o.sizes.end()));
  ps_process ps{argv0, t};
  tls_client raw{ps.raw_port(), files, max_dense, max_dense};
  caf::actor_system_config cfg;
  configure_transport(cfg, tls_cluster(files), 2, max_message(o));
  caf::actor_system sys{cfg};
  basp_client at{sys, ps.basp_port(), nullptr, true, /*as_task=*/true};
  // The data plane as a TLS cluster's worker opens it (shared memory only when both
  // sides share a network namespace: not with --netns).
  auto ep = ps.plane();
  ep.tls = data_plane::tls_context(files.certificate, files.key, files.ca);
  basp_client plane{sys, ps.basp_port(), &ep, true, /*as_task=*/true};
  fmt::print("\ntls: the dense rounds again over mutual TLS (a temporary CA; one node certificate that both\n"
             "sides present and verify). A new ps side, process {} (raw TLS port {}, BASP/TLS port {}).\n"
             "raw TLS: libssl on a blocking TCP_NODELAY socket, SSL_write N bytes, SSL_read N bytes;\n"
             "         {}, handshake {:.1f} ms.\n"
             "actortrain: BASP as a TLS task runs it (TLS ended by the guards, which relay the\n"
             "            plaintext to CAF), connected in {:.1f} ms (handshake included).\n"
             "plane: the same messages on the data plane inside TLS, as a TLS cluster's worker\n"
             "       moves its tensors{}.\n"
             "Medians of {} interleaved rounds after {} warm-up. tls/tcp and tls/plain divide by\n"
             "the dense table's medians above (measured before these, not interleaved with them).\n\n",
             ps.pid(), ps.raw_port(), ps.basp_port(), raw.session(), raw.handshake_ms(), at.connect_ms(),
             o.netns ? ", across the two namespaces" : "", o.rounds, warmup_rounds);
  fmt::print("{:>10} {:>8} {:>10} {:>12} {:>10} {:>10} {:>10} {:>11} {:>11} {:>12} {:>13}\n", "bytes", "",
             "raw TLS ms", "raw TLS MB/s", "BASP ms", "BASP/raw", "plane ms", "plane MB/s", "plane/raw", "raw tls/tcp",
             "BASP tls/plain");
  std::optional<std::pair<double, double>> at_goal;
  for (size_t i = 0; i < o.sizes.size(); ++i) {
    auto n = o.sizes[i];
    auto push = dense_push(n), pull = dense_pull(i);
    auto t = interleave_all(o.rounds, {[&] { return raw.round_ms(static_cast<uint64_t>(n), static_cast<uint64_t>(n)); },
                                       [&] { return at.dense_round_ms(push, pull, n / 4); },
                                       [&] { return plane.dense_round_ms(push, pull, n / 4); }});
    auto moved = 2.0 * static_cast<double>(n);
    const auto& p = plain[i];
    fmt::print("{:>10} {:>8} {:>10.3f} {:>12.1f} {:>10.3f} {:>9.2f}x {:>10.3f} {:>11.1f} {:>10.2f}x {:>11.2f}x {:>12.2f}x\n",
               n, human_bytes(n), t[0], mb_per_s(moved, t[0]), t[1], t[1] / t[0], t[2], mb_per_s(moved, t[2]),
               t[2] / t[0], t[0] / p.raw_ms, t[1] / p.actortrain_ms);
    std::fflush(stdout);
    if (n == goal_bytes) at_goal = std::pair{t[1] / t[0], t[2] / t[0]};
  }
  if (at_goal)
    fmt::print("\ntls at {} bytes (4 MiB){}: BASP/raw TLS = {:.2f}x; data plane/raw TLS = {:.2f}x (goal: within "
               "{}x: {})\n",
               goal_bytes, o.netns ? ", across two namespaces" : "", at_goal->first, at_goal->second, tls_goal_ratio,
               at_goal->second <= tls_goal_ratio ? "met" : "NOT met");
  else
    fmt::print("\ntls: 4 MiB not measured (--sizes lacks {})\n", goal_bytes);
  raw.close();  // the ps side's cue to exit
  if (auto how = ps.finish(); !how.empty()) {
    fmt::print(stderr, "actortrain bench transport: the TLS ps side {}\n", how);
    return 1;
  }
  return 0;
}

int measure_plain(const char* argv0, const transport_options& o, std::vector<paired_medians>& plain);

int measure(const char* argv0, transport_options o) {
  // First: a missing openssl command ends the bench before it measures anything. The
  // directory outlives both ps sides (each is reaped before its scope ends).
  std::optional<temp_certs> certs;
  if (o.tls) certs.emplace();
  // --netns: this thread (and every thread the bench starts later) in one namespace,
  // the ps sides in the other.
  std::optional<netns_pair> ns;  // the ps side in server(), the bench in client()
  if (o.netns) {
    try {
      ns.emplace("bench", false);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("--netns: {}", e.what()));
    }
    enter_netns(ns->client());
    host = ns->server_ip();
    o.serve_netns = ns->server();
    o.serve_host = ns->server_ip();
    fmt::print("bench transport: across two network namespaces on a veth pair: the ps side at {}\n", host);
  }
  std::vector<paired_medians> plain;
  if (int rc = measure_plain(argv0, o, plain); rc != 0 || !o.tls) return rc;
  return measure_tls(argv0, o, certs->dir(), plain);
}

int measure_plain(const char* argv0, const transport_options& o, std::vector<paired_medians>& plain) {
  int64_t max_dense = *std::max_element(o.sizes.begin(), o.sizes.end());
  // Generous for the sparse reply: its serialized size exceeds 12 bytes a row only by a
  // few dozen bytes of fields.
  auto max_sparse = static_cast<size_t>(o.sparse_rows) * 12 + 4096;
  ps_process ps{argv0, o};
  raw_client raw{ps.raw_port(), std::max<size_t>(static_cast<size_t>(max_dense), max_sparse),
                 std::max<size_t>(static_cast<size_t>(max_dense), max_sparse)};
  caf::actor_system_config cfg;
  configure_system(cfg);
  caf::actor_system sys{cfg};
  basp_client at{sys, ps.basp_port()};
  basp_client plane{sys, ps.basp_port(), &ps.plane()};
  basp_client tcp_plane{sys, ps.basp_port(), &ps.plane(), /*shared_memory=*/false};
  fmt::print("bench transport: ps side is process {} on {} (raw TCP port {}, BASP port {}, connected in {:.1f} ms,\n"
             "data plane port {})\n",
             ps.pid(), host, ps.raw_port(), ps.basp_port(), at.connect_ms(), ps.plane().port);
  auto goal = measure_dense(o, raw, at, plane, tcp_plane, plain);
  if (o.sparse_rows > 0) measure_sparse(o, sys, raw, at, plane, tcp_plane);
  print_goal(goal);
  raw.close();  // the ps side's cue to exit
  if (auto how = ps.finish(); !how.empty()) {
    fmt::print(stderr, "actortrain bench transport: the ps side {}\n", how);
    return 1;
  }
  return 0;
}

// -- bench sparse --processes: the bench's side ---------------------------------------

// Makes this process's VmHWM restart from what is resident now.
// Memory the allocator still holds from an earlier table is given back first.
void reset_peak() {
  ::malloc_trim(0);
  std::ofstream out{"/proc/self/clear_refs"};
  if (!(out << "5" << std::flush))
    fmt::print(stderr, "bench: could not reset the peak memory (/proc/self/clear_refs): the peaks below include "
                       "what came before\n");
}

// VmHWM of process `pid` ("self" for this one), in MB; -1 when unreadable.
double peak_mb(const std::string& pid) {
  std::ifstream in{"/proc/" + pid + "/status"};
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return -1;
}

// Rows a second, from rows moved in `ms` milliseconds.
double per_s(double rows, double ms) { return rows / (ms / 1e3); }

// The requests of a table bench over `n` ids. A pull: o.batch ids drawn from the table's
// (repeats allowed, as a batch has them); a push: as many distinct ones, sorted, with a
// gradient row each.
std::pair<pull_rows_request, std::vector<int64_t>> table_requests(const table_bench_options& o, int64_t n) {
  model::rng g{17};
  pull_rows_request pull;
  pull.f = table_fence();
  pull.variable = 0;
  pull.training = true;
  for (int64_t j = 0; j < o.batch; ++j) pull.ids.push_back(scattered_id(static_cast<int64_t>(g.below(static_cast<uint64_t>(n)))));
  std::vector<int64_t> distinct;
  for (int64_t v = 0; static_cast<int64_t>(distinct.size()) < std::min(o.batch, n); v += std::max<int64_t>(1, n / o.batch))
    distinct.push_back(scattered_id(v % n));
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  return {std::move(pull), std::move(distinct)};
}

// One table of `n` ids on a real ps shard process: pulls and pushes of o.batch ids,
// interleaved with raw TCP moving the pull's bytes; medians.
void measure_table(const char* argv0, const table_bench_options& o, int64_t n) {
  transport_options t;
  t.rounds = o.rounds;
  t.sizes_text = "4";
  t.sizes = {4};
  t.sparse_rows = 0;
  t.serve_table = n;
  t.table_dim = o.dim;
  t.table_optimizer = o.optimizer;
  reset_peak();  // this process's peak, from here (an earlier table's does not count)
  auto started = steady_clock::now();
  ps_process ps{argv0, t};
  auto fill_s = ms_since(started) / 1e3;
  caf::actor_system_config cfg;
  configure_system(cfg);
  caf::actor_system sys{cfg};
  auto [pull, distinct] = table_requests(o, n);
  auto up = serialized_bytes(sys, pull);
  auto down = serialized_bytes(sys, rows_reply{0, 0, pull.ids, tensor{model::matrix::Zero(o.batch, o.dim)}});
  auto pull_msg = caf::make_message(pull_rows_atom::value, pull);
  raw_client raw{ps.raw_port(), up, down};
  basp_client at{sys, ps.basp_port()};
  basp_client plane{sys, ps.basp_port(), &ps.plane()};
  uint64_t position = uint64_t{1} << 32;  // past the fill's pushes
  auto push_ms = [&](basp_client& c) {
    auto msg = caf::make_message(push_atom::value, table_push(distinct, o.dim, position++, 0.001f));
    return c.push_round_ms(msg);
  };
  auto m = interleave_all(o.rounds, {[&] { return raw.round_ms(up, down); },
                                     [&] { return at.sparse_round_ms(pull_msg, o.batch); },
                                     [&] { return plane.sparse_round_ms(pull_msg, o.batch); },
                                     [&] { return plane.sparse_round_ms(pull_msg, o.batch, 2); },
                                     [&] { return push_ms(at); }, [&] { return push_ms(plane); }});
  auto stats = at.stats();
  if (stats.tables.size() != 1) throw std::runtime_error("the table shard reports no table");
  const auto& tb = stats.tables[0];
  fmt::print("\n{} ids x {} floats ({}): a ps shard process (pid {}) filled in {:.1f} s; {} ids a pull, {} a push;\n"
             "medians of {} interleaved rounds after {} warm-up\n",
             n, o.dim, o.optimizer, ps.pid(), fill_s, o.batch, distinct.size(), o.rounds, warmup_rounds);
  fmt::print("{:>26} {:>10} {:>14}\n", "", "ms", "rows/s");
  fmt::print("{:>26} {:>10.2f} {:>14.0f}   ({} bytes up, {} down)\n", "raw TCP, the pull's bytes", m[0],
             per_s(static_cast<double>(o.batch), m[0]), up, down);
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "pull over BASP", m[1], per_s(static_cast<double>(o.batch), m[1]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "pull on the data plane", m[2], per_s(static_cast<double>(o.batch), m[2]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}   (two pulls at once, as two workers)\n", "2 pulls on the data plane", m[3],
             per_s(2.0 * static_cast<double>(o.batch), m[3]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "push over BASP", m[4], per_s(static_cast<double>(distinct.size()), m[4]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "push on the data plane", m[5], per_s(static_cast<double>(distinct.size()), m[5]));
  fmt::print("shard: {} rows, {:.1f} bytes a row ({:.2f}x the floats of its rows and slots); peak resident memory:\n"
             "shard process {:.0f} MB, this process (the worker's side) {:.0f} MB\n",
             tb.rows, tb.rows ? static_cast<double>(tb.bytes) / static_cast<double>(tb.rows) : 0.0,
             tb.payload_bytes ? static_cast<double>(tb.bytes) / static_cast<double>(tb.payload_bytes) : 0.0,
             peak_mb(std::to_string(ps.pid())), peak_mb("self"));
  std::fflush(stdout);
  raw.close();
  if (auto how = ps.finish(); !how.empty()) throw std::runtime_error("the table shard process " + how);
}

// The same table on a shard in this process, as the embedded cluster holds it: the same
// requests as messages (nothing serialized), after the shard process has gone. Its peak
// resident memory is this process's, counted from the fill (the count is reset first).
void measure_table_embedded(const table_bench_options& o, int64_t n) {
  transport_options t;
  t.serve_table = n;
  t.table_dim = o.dim;
  t.table_optimizer = o.optimizer;
  reset_peak();
  caf::actor_system_config cfg;
  configure_system(cfg);
  caf::actor_system sys{cfg};
  auto started = steady_clock::now();
  exit_at_scope_end shard{make_table_shard(sys, t)};
  auto fill_s = ms_since(started) / 1e3;
  auto [pull, distinct] = table_requests(o, n);
  auto pull_msg = caf::make_message(pull_rows_atom::value, pull);
  exit_at_scope_end runner{sys.spawn(round_runner, shard.a, caf::actor{})};
  auto ask = [&](caf::message round) { return run_round(sys, runner.a, std::move(round)); };
  uint64_t position = uint64_t{1} << 32;  // past the fill's pushes
  auto m = interleave_all(o.rounds, {[&] { return ask(caf::make_message(sparse_round_atom::value, pull_msg, o.batch, int32_t{1})); },
                                     [&] { return ask(caf::make_message(sparse_round_atom::value, pull_msg, o.batch, int32_t{2})); },
                                     [&] {
                                       auto push = caf::make_message(push_atom::value, table_push(distinct, o.dim, position++, 0.001f));
                                       return ask(caf::make_message(push_round_atom::value, push));
                                     }});
  auto stats = stats_of(sys, shard.a);
  if (stats.tables.size() != 1) throw std::runtime_error("the embedded table shard reports no table");
  const auto& tb = stats.tables[0];
  fmt::print("\nthe same {} ids on a shard in this process (embedded), filled in {:.1f} s; medians of {} interleaved rounds\n",
             n, fill_s, o.rounds);
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "pull, embedded", m[0], per_s(static_cast<double>(o.batch), m[0]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}   (two pulls at once, as two workers)\n", "2 pulls, embedded", m[1],
             per_s(2.0 * static_cast<double>(o.batch), m[1]));
  fmt::print("{:>26} {:>10.2f} {:>14.0f}\n", "push, embedded", m[2], per_s(static_cast<double>(distinct.size()), m[2]));
  fmt::print("shard: {} rows, {:.1f} bytes a row ({:.2f}x the floats); peak resident memory of this process {:.0f} MB\n",
             tb.rows, tb.rows ? static_cast<double>(tb.bytes) / static_cast<double>(tb.rows) : 0.0,
             tb.payload_bytes ? static_cast<double>(tb.bytes) / static_cast<double>(tb.payload_bytes) : 0.0, peak_mb("self"));
  std::fflush(stdout);
}

}  // namespace

int bench_table_across_processes(const char* argv0, const table_bench_options& o) {
  table_optimizer(o.optimizer);  // a bad name fails before any process starts
  fmt::print("bench sparse --processes: a table keyed by id on a real ps shard in a process of its own (its\n"
             "ids scattered over [0, 2^40), rows at their initial values), pulled and pushed by row from\n"
             "this process over BASP and on the tensor data plane, as a worker does; raw TCP moves the\n"
             "pull's serialized bytes. Then each table on a shard in this process (embedded).\n");
  // Every table across processes first: memory an embedded shard gave back may stay
  // with this process's allocator, and would count in the worker's side's peak.
  for (auto n : o.ids) measure_table(argv0, o, n);
  for (auto n : o.ids) measure_table_embedded(o, n);
  return 0;
}

int bench_transport(int argc, char** argv, int first) {
  transport_options o;
  int serve_fd = -1;
  flags f{"actortrain bench transport",
          "Measures the tensor data plane between two processes on 127.0.0.1: the bench starts\n"
          "a second process of itself as the ps side and compares, per --sizes entry, a raw\n"
          "blocking TCP_NODELAY socket (send N bytes, receive N bytes) with ActorTrain's messages\n"
          "(a push_request of one N-byte dense_slice, then a pull_request answered with one N-byte\n"
          "partition; the ps side applies nothing) over CAF's BASP, on ActorTrain's tensor data\n"
          "plane (large floats in its shared-memory rings) and on the data plane with every float\n"
          "on its TCP stream, --rounds interleaved rounds each after 3 warm-up rounds. Prints median\n"
          "ms, MB/s (both directions) and the ratios to raw per size, and whether the data plane\n"
          "meets the goal of 1.2x raw TCP at 4 MiB. Then one pull_rows_request of --sparse-rows ids\n"
          "against a --sparse-rows x 1 partition (0 skips it): median ms and keys/s of the four, raw TCP\n"
          "moving the same serialized byte counts. --tls adds the dense\n"
          "sizes over mutual TLS (certificates made with the openssl command in a temporary\n"
          "directory): a raw OpenSSL socket pair beside ActorTrain's BASP as a TLS task runs it and\n"
          "the data plane inside TLS, and whether the data plane meets 1.3x raw TLS at 4 MiB. --netns\n"
          "puts the two processes in two network namespaces on a veth pair, as two hosts (root)."};
  f.add("rounds", o.rounds, "measured rounds per size (each runs raw, BASP and both data planes)")
    .add("sizes", o.sizes_text, "comma-separated message sizes in bytes (multiples of 4)")
    .add("sparse-rows", o.sparse_rows, "row ids in the sparse pull (0: skip it)")
    .add("tls", o.tls, "also measure the dense sizes over mutual TLS (raw OpenSSL and ActorTrain's TLS)")
    .add("netns", o.netns,
         "run the ps side and the bench in two network namespaces joined by a veth pair (as two hosts; needs "
         "root and the ip command)")
    .add("serve-tls", o.serve_tls, "internal: the ps side serves over TLS with the certificates in this directory")
    .add("serve-netns", o.serve_netns, "internal: the ps side enters this network namespace first")
    .add("serve-host", o.serve_host, "internal: the ps side listens at this address")
    .add("serve-fd", serve_fd, "internal: run as the ps side, reporting its ports on this file descriptor")
    .add("serve-table", o.serve_table, "internal: the ps side is a real shard whose table keyed by id holds this many ids")
    .add("table-dim", o.table_dim, "internal: its width")
    .add("table-optimizer", o.table_optimizer, "internal: its optimizer (adam or sgd)");
  if (!f.parse(argc, argv, first)) return 0;
  if (!f.positional().empty()) throw usage_error("unexpected argument '" + f.positional()[0] + "'");
  if (o.rounds < 1 || o.rounds > 100000) throw usage_error("--rounds must be in [1, 100000]");
  if (o.sparse_rows < 0 || o.sparse_rows > max_sparse_rows)
    throw usage_error(fmt::format("--sparse-rows must be in [0, {}]", max_sparse_rows));
  o.sizes = parse_counts(o.sizes_text, "--sizes", 4, max_dense_bytes, 4,
                         fmt::format("a byte count in [4, {}] divisible by 4", max_dense_bytes), "no sizes given");
  if (serve_fd >= 0) {
    if (!o.serve_netns.empty()) enter_netns(o.serve_netns);
    if (!o.serve_host.empty()) host = o.serve_host;
    return serve(o, serve_fd);
  }
  return measure(argv[0], o);
}

}  // namespace actortrain::tools
