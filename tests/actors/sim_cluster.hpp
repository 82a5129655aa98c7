#pragma once
// A fixture for tests that drive an embedded cluster on CAF's test coordinator: run a fit
// to its end (moving the simulated clock when nothing else can happen), read the trained
// variables and the shards' counters, and compare variables with a local trainer's.
// Include after caf_test.hpp.

#include <actortrain/actors/cluster/cluster.hpp>
#include <actortrain/actors/cluster/events.hpp>
#include <actortrain/dataset/all.hpp>
#include <actortrain/model/all.hpp>

#include "../../actors/src/cluster/cluster_internals.hpp"

#include <optional>
#include <string>
#include <vector>

namespace actortrain::testing {

struct cluster_fixture : fixture {
  std::vector<event> step_events;  // of the last run() that kept them

  // Runs `fn` for `epochs` to the end. With `keep` the step events are taken here
  // (step_events; the cluster then sees none, so nothing may need restarting), else the
  // cluster takes every event (fit_result's staleness figures).
  fit_result run(cluster& c, dataset::dataset_fn fn, int epochs = 1, bool keep = true) {
    model::fit_options o;
    o.epochs = epochs;
    return run(c, std::move(fn), o, keep);
  }

  fit_result run(cluster& c, dataset::dataset_fn fn, model::fit_options o, bool keep = true) {
    o.verbose = 0;
    step_events.clear();
    auto h = c.schedule(std::move(fn), o);
    for (int i = 0; i < 100000; ++i) {
      sched.run();
      while (auto e = keep ? c.events()->pop() : std::nullopt)
        if (e->kind == event_kind::step_done) step_events.push_back(*e);
      if (c.done(h)) break;
      if (!sched.has_job()) sched.advance_time(std::chrono::milliseconds(10));
    }
    BOOST_REQUIRE(c.done(h));
    return c.join(h);
  }

  model::parameter_store variables(cluster& c) {
    auto f = c.pull_variables();
    sched.run();
    return f.get();
  }

  std::vector<ps_stats> shard_stats(cluster& c) {
    auto f = cluster_internals::shard_stats(c);
    sched.run();
    return f.get();
  }

  // Every variable of `c` agrees with `t`'s to max |a - b| <= 1e-5 (1 + max |b|).
  void close_to_trainer(cluster& c, const model::trainer& t, const std::string& what) {
    auto got = variables(c);
    BOOST_REQUIRE(got.size() == t.parameters().size());
    for (size_t v = 0; v < got.size(); ++v) {
      const auto& a = got[static_cast<model::variable_id>(v)];
      const auto& b = t.parameters()[static_cast<model::variable_id>(v)];
      BOOST_REQUIRE(a.rows() == b.rows());
      if (b.size() == 0) continue;  // a dynamic table: no rows here (compare its rows with lookup)
      auto diff = (a - b).cwiseAbs().maxCoeff();
      BOOST_TEST(diff <= 1e-5f * (1 + b.cwiseAbs().maxCoeff()),
                 what << ": " << c.structure().variables()[v].name << " differs by " << diff);
    }
  }
};

}  // namespace actortrain::testing
