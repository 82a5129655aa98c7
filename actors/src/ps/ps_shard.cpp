// The ps shard actor: its mailbox, thread and error handler around a shard_store, which
// makes every decision (shard_store.hpp; the contract is in ps_shard.hpp).
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/ps/ps_shard.hpp>

#include <fmt/format.h>

#include "../core/thread_name.hpp"
#include "shard_store.hpp"

namespace actortrain {

namespace {

struct ps_state {
  std::unique_ptr<shard_store> store;
  std::shared_ptr<model::file_system> checkpoint_fs;  // shared checkpoints (null: posix)
  static inline const char* name = "ps_shard";
};

using self_ptr = ps_shard_actor::stateful_pointer<ps_state>;

// The reply, or the store's failure as the request's error.
template <class T>
caf::result<T> answer(failure f, T reply) {
  if (f) return make_error(std::move(f));
  return reply;
}

caf::result<caf::ok_atom> done(failure f) { return answer(std::move(f), caf::ok_atom::value); }

ps_shard_actor::behavior_type ps_shard_impl(self_ptr self, std::shared_ptr<const model::optimizer> opt,
                                            ps_shard_options opts) {
  if (opts.detached) detail::name_this_thread(fmt::format("at.ps{}", opts.index));
  self->state.checkpoint_fs = opts.checkpoint_fs;
  self->state.store = std::make_unique<shard_store>(
    *opt, shard_store::options{opts.index, std::move(opts.policy), opts.staleness_buckets, opts.apply_log,
                               std::move(opts.groups), opts.compensation, std::move(opts.variables)});
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    return make_error(error_code::user_error,
                      fmt::format("ps shard {}: {}", self->state.store->index(), exception_text(eptr)));
  });
  auto& store = *self->state.store;
  return {
    [&store](init_atom, init_request& req) -> caf::result<caf::ok_atom> {
      return done(store.init(req));
    },
    [&store](pull_atom, const pull_request& req) -> caf::result<pull_reply> {
      pull_reply r;
      auto f = store.pull(req, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](pull_rows_atom, pull_rows_request& req) -> caf::result<rows_reply> {
      rows_reply r;
      auto f = store.pull_rows(req, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](push_atom, push_request& req) -> caf::result<push_reply> {
      push_reply r;
      auto f = store.push(req, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](round_atom, const round_request& req) -> caf::result<round_reply> {
      round_reply r;
      auto f = store.round(req, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](hyper_atom, const hyperparams_request& req) -> caf::result<caf::ok_atom> {
      return done(store.set_hyperparams(req));
    },
    [&store](fence_atom, const fence_request& req) -> caf::result<fence> {
      fence r;
      auto f = store.raise_fence(req, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](snapshot_atom, const fence_request& req, const snapshot_basis& b) -> caf::result<ps_snapshot> {
      ps_snapshot r;
      auto f = store.snapshot(req, b, r);
      return answer(std::move(f), std::move(r));
    },
    [self](snapshot_atom, const fence_request& req, const checkpoint_target& t,
           const snapshot_basis& b) -> caf::result<ps_files> {
      auto& fs = self->state.checkpoint_fs ? *self->state.checkpoint_fs : model::posix_file_system();
      ps_files r;
      auto f = self->state.store->snapshot_files(req, t, b, fs, r);
      return answer(std::move(f), std::move(r));
    },
    [&store](keep_atom, const fence_request& req) -> caf::result<caf::ok_atom> {
      return done(store.keep(req));
    },
    [&store](restore_atom, const fence_request& req) -> caf::result<caf::ok_atom> {
      return done(store.restore(req));
    },
    [&store](ledger_atom) -> ps_ledgers { return store.ledgers(); },
    [&store](stats_atom) -> ps_stats { return store.stats(); },
  };
}

}  // namespace

ps_shard_actor spawn_ps_shard(caf::actor_system& sys, const model::optimizer& opt, ps_shard_options opts) {
  std::shared_ptr<const model::optimizer> copy = opt.clone();
  bool detached = opts.detached;
  if (detached) return sys.spawn<caf::detached>(ps_shard_impl, copy, std::move(opts));
  return sys.spawn(ps_shard_impl, copy, std::move(opts));
}

}  // namespace actortrain
