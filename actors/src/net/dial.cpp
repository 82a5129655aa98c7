// Dialing a task of the cluster and asking a ps task for its shard (see dial.hpp).
#include "dial.hpp"

#include "basp_guard.hpp"
#include "job_auth.hpp"
#include "tls.hpp"

#include <actortrain/actors/core/errors.hpp>

#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/io/middleman_actor.hpp>

#include <fmt/format.h>

#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

namespace actortrain {

namespace {

using retry_atom = caf::atom_constant<caf::atom("retry")>;

constexpr auto retry_pause = std::chrono::milliseconds(200);

// Handshakes a peer cuts in a row before dial_from takes it as a refusal. One cut is
// not enough: a peer killed (or restarting) while it answers cuts the handshake too,
// and then its port refuses connections or a new process answers on the next attempt.
// A peer of another CA or of the other TLS setting cuts every one.
constexpr int refusals_before_final = 3;

caf::error refused_handshake() {
  return make_error(error_code::invalid_request,
                    "the peer cut the BASP handshake (a task restarting, or a node that is not of this job)");
}

// How this process proves membership when it dials: the job's key (plain), or the TLS
// files; and what the servers it dials may announce.
struct membership {
  std::optional<detail::job_key> key;
  std::optional<detail::tls::files> tls;
  uint64_t max_payload = uint64_t{64} << 20;
};

// The outbound guard of this process: relays every connection a dial made (the server's
// BASP stream checked, TLS ended here), for every actor system of the process.
detail::basp_guard& outbound_guard() {
  static detail::basp_guard guard{[](const std::string& line) { std::cerr << "actortrain: " << line << '\n'; }};
  return guard;
}

// One attempt of a dial that proves membership, in a detached actor of its own (it
// blocks for at most `bound`): the job's exchange (job_auth.hpp) or the TLS handshake
// (tls.hpp) on our own socket, then the outbound guard relays the socket and its other
// end goes to the BASP broker, which answers the requester as CAF's own connect would.
// A peer that refuses the proof (or is not a node of this job) is an invalid_request:
// final; the network's failures are worth another attempt.
caf::behavior member_dialer(caf::event_based_actor* self, membership m) {
  using reply = caf::result<caf::node_id, caf::strong_actor_ptr, std::set<std::string>>;
  return {
    [self, m](caf::connect_atom, const std::string& host, uint16_t port, caf::timespan bound) -> reply {
      self->quit();
      auto ms = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(bound));
      net::unique_fd fd;
      std::unique_ptr<detail::tls::session> session;
      std::shared_ptr<const detail::tls::context> ctx;
      try {
        if (m.tls) ctx = detail::tls::context_for(*m.tls);
      } catch (const std::exception& e) {
        return make_error(error_code::invalid_request, e.what());
      }
      try {
        if (ctx) {
          auto c = detail::tls::dial(host, port, *ctx, ms);
          fd = std::move(c.fd);
          session = std::move(c.tls);
        } else {
          fd = detail::auth::dial_member(host, port, *m.key, ms);
        }
      } catch (const detail::auth::refused& e) {
        return make_error(error_code::invalid_request, e.what());
      } catch (const detail::tls::refused& e) {
        return make_error(error_code::invalid_request, e.what());
      } catch (const std::exception& e) {
        return make_error(error_code::timeout, e.what());
      }
      net::unique_fd ours;
      try {
        ours = outbound_guard().adopt(std::move(fd), std::move(session), fmt::format("{}:{}", host, port),
                                      detail::basp_check::limits{m.max_payload});
      } catch (const std::exception& e) {
        return make_error(error_code::timeout, e.what());
      }
      auto& mm = self->system().middleman();
      auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
      auto scribe = mm.backend().new_scribe(ours.get());
      ours.release();  // the scribe owns it now
      self->delegate(basp, caf::connect_atom::value, std::move(scribe), port);
      return caf::delegated<caf::node_id, caf::strong_actor_ptr, std::set<std::string>>{};
    },
  };
}

// What the system's config says about membership (configure_for put it there).
std::optional<membership> membership_of(const caf::actor_system& sys) {
  membership m;
  auto key_hex = caf::get_or(sys.config(), job_key_option, std::string{});
  auto cert = caf::get_or(sys.config(), tls_certificate_option, std::string{});
  if (!cert.empty())
    m.tls = detail::tls::files{cert, caf::get_or(sys.config(), tls_key_option, std::string{}),
                               caf::get_or(sys.config(), tls_ca_option, std::string{})};
  else if (!key_hex.empty())
    m.key = detail::key_from_hex(key_hex);
  else
    return std::nullopt;
  auto max = caf::get_or(sys.config(), max_message_option, int64_t{0});
  if (max > 0) m.max_payload = static_cast<uint64_t>(max);
  return m;
}

}  // namespace

// Every attempt has its own timeout, so a peer that accepts but never answers costs one
// attempt, not a hang.
void dial_from(caf::event_based_actor* self, task_address addr, std::chrono::steady_clock::time_point deadline,
               std::function<void(caf::expected<caf::actor>)> done, bool refusal_final) {
  // With the job's key or TLS, a member dialer of our own (it proves membership);
  // without either (tests of CAF's own transport), CAF's middleman.
  auto& sys = self->system();
  auto member = membership_of(sys);
  auto mm = sys.middleman().actor_handle();
  auto last = std::make_shared<caf::error>(make_error(error_code::timeout, "no attempt"));
  auto cuts = std::make_shared<int>(0);  // handshakes cut in a row
  auto attempt = std::make_shared<std::function<void()>>();
  *attempt = [self, mm, member, addr, deadline, done, last, cuts, refusal_final] {
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= decltype(left)::zero()) {
      done(std::move(*last));
      return;
    }
    auto retry = [self] { self->delayed_send(self, retry_pause, retry_atom::value); };
    auto t = std::min<caf::timespan>(std::chrono::duration_cast<caf::timespan>(left), std::chrono::seconds(3));
    auto sent = member ? self->request(self->spawn<caf::detached>(member_dialer, *member), t + std::chrono::seconds(2),
                                    caf::connect_atom::value, addr.host, addr.port, t)
                    : self->request(caf::actor_cast<caf::actor>(mm), t, caf::connect_atom::value, addr.host, addr.port);
    sent
      .then(
        [done, last, retry](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) {
          if (!p) {
            *last = make_error(error_code::invalid_request, "nothing is published there");
            retry();
            return;
          }
          done(caf::actor_cast<caf::actor>(std::move(p)));
        },
        [last, cuts, retry, done, refusal_final](caf::error& e) {
          // A peer that refuses the TLS handshake (another CA, or no TLS at all) will not
          // change its mind: after a few cuts in a row, no point in trying again.
          // Redialing a task that is coming back (refusal_final = false), CAF 0.17 was
          // seen to close handshakes of a restarted ps process: try on until the deadline.
          if (code_of(e) == error_code::invalid_request) {  // the member dialer's refusal
            done(std::move(e));
            return;
          }
          if (e == caf::sec::disconnect_during_handshake) {
            *last = refused_handshake();
            if (refusal_final && ++*cuts >= refusals_before_final) {
              done(std::move(*last));
              return;
            }
          } else {
            *cuts = 0;
            *last = std::move(e);
          }
          retry();
        });
  };
  (*attempt)();
  self->become(caf::keep_behavior, [attempt](retry_atom) { (*attempt)(); });
}

std::string unreachable(const task_address& addr, std::chrono::milliseconds budget, const caf::error& e) {
  return fmt::format("cannot reach {} within {} ms: {}", addr.text(), budget.count(), describe(e));
}

// A failed dial: a refusal stays one (final: another CA, another job), anything else is
// a timeout (worth a restart).
static caf::error failed_dial(const task_address& addr, std::chrono::milliseconds budget, const caf::error& e) {
  auto code = code_of(e) == error_code::invalid_request ? error_code::invalid_request : error_code::timeout;
  return make_error(code, unreachable(addr, budget, e));
}

// Runs `start(self, done)` in a one-shot actor and waits on the calling thread for the
// one result `done` receives.
template <class T, class Start>
caf::expected<T> wait_for(caf::actor_system& sys, Start start) {
  auto promise = std::make_shared<std::promise<caf::expected<T>>>();
  auto fut = promise->get_future();
  sys.spawn([=](caf::event_based_actor* self) {
    start(self, [self, promise](caf::expected<T> r) {
      promise->set_value(std::move(r));
      self->quit();
    });
  });
  return fut.get();
}

caf::expected<caf::actor> dial(caf::actor_system& sys, const task_address& addr, std::chrono::milliseconds budget) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  auto r = wait_for<caf::actor>(sys, [=](caf::event_based_actor* self, auto done) { dial_from(self, addr, deadline, done); });
  if (!r) return failed_dial(addr, budget, r.error());
  return r;
}

// A request to a peer that dies is never answered in CAF 0.17 (only its timeout ends it):
// hence the monitor.
void fetch_shard_from(caf::event_based_actor* self, task_address addr, uint32_t index, std::chrono::milliseconds budget,
                      std::chrono::steady_clock::time_point deadline, caf::timespan timeout,
                      std::function<void(caf::expected<located_shard>)> done, bool refusal_final) {
  auto settled = std::make_shared<bool>(false);
  auto finish = [settled, done](caf::expected<located_shard> r) {
    if (*settled) return;
    *settled = true;
    done(std::move(r));
  };
  dial_from(self, addr, deadline, [self, addr, index, budget, deadline, timeout, done, settled, finish](
                                    caf::expected<caf::actor> node) {
    if (!node) {
      finish(failed_dial(addr, budget, node.error()));
      return;
    }
    auto n = *node;
    self->monitor(n);
    self->set_down_handler([self, n, addr, index, budget, deadline, timeout, done, settled](caf::down_msg& dm) {
      if (*settled || dm.source != n.address()) return;
      *settled = true;  // this attempt; the next one settles on its own
      if (std::chrono::steady_clock::now() >= deadline) {
        done(make_error(error_code::timeout, fmt::format("ps shard {}'s task went down before it answered", index)));
        return;
      }
      // The task is coming back: a handshake cut while its old process dies or its new
      // one starts is not a peer that refuses us (it answered one handshake already).
      fetch_shard_from(self, addr, index, budget, deadline, timeout, done, /*refusal_final=*/false);
    });
    self->request(n, timeout, ps_handle_atom::value, index)
      .then(
        [self, n, finish](shard_contact& c) {
          self->demonitor(n);
          finish(located_shard{n, std::move(c)});
        },
        [self, n, finish](caf::error& e) {
          self->demonitor(n);
          finish(std::move(e));
        });
  }, refusal_final);
}

caf::expected<located_shard> fetch_shard(caf::actor_system& sys, const task_address& addr, uint32_t index,
                                         std::chrono::milliseconds budget, caf::timespan timeout) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  return wait_for<located_shard>(sys, [=](caf::event_based_actor* self, auto done) {
    fetch_shard_from(self, addr, index, budget, deadline, timeout, done, /*refusal_final=*/true);
  });
}

}  // namespace actortrain
