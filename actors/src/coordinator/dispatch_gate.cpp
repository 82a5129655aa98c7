// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
#include <actortrain/actors/coordinator/dispatch_gate.hpp>

#include <stdexcept>

#include <fmt/format.h>

namespace actortrain {

namespace {

class when_free_gate : public dispatch_gate {
 public:
  std::string describe() const override { return "async"; }
  bool may_dispatch(const gate_view&) const override { return true; }
};

class bounded_gate : public dispatch_gate {
 public:
  explicit bounded_gate(uint64_t s) : s_(s) {}
  std::string describe() const override { return fmt::format("bounded_staleness({})", s_); }
  bool ordered() const override { return true; }
  bool may_dispatch(const gate_view& v) const override { return room(v) > 0; }
  uint64_t room(const gate_view& v) const override {
    auto spread = v.dispatched - v.oldest_unapplied;  // the next index minus the oldest
    return spread <= s_ ? s_ + 1 - spread : 0;
  }

 private:
  uint64_t s_;
};

class rounds_gate : public dispatch_gate {
 public:
  explicit rounds_gate(uint64_t r) : r_(r) {}
  std::string describe() const override { return "sync"; }
  bool ordered() const override { return true; }
  bool may_dispatch(const gate_view& v) const override { return v.round_members < r_; }
  uint64_t room(const gate_view& v) const override { return v.round_members < r_ ? r_ - v.round_members : 0; }
  uint64_t round_size() const override { return r_; }

 private:
  uint64_t r_;
};

}  // namespace

std::unique_ptr<dispatch_gate> dispatch_when_free() { return std::make_unique<when_free_gate>(); }
std::unique_ptr<dispatch_gate> bounded_staleness(uint64_t s) { return std::make_unique<bounded_gate>(s); }
std::unique_ptr<dispatch_gate> sync_rounds(uint64_t replicas) {
  if (replicas == 0) throw std::invalid_argument("sync_rounds: 0 replicas");
  return std::make_unique<rounds_gate>(replicas);
}

std::unique_ptr<dispatch_gate> make_gate(const consistency_mode& mode, int replicas) {
  switch (mode.mode()) {
    case consistency_mode::kind::async: return dispatch_when_free();
    case consistency_mode::kind::bounded_staleness: return bounded_staleness(mode.bound());
    case consistency_mode::kind::sync: return sync_rounds(static_cast<uint64_t>(replicas));
  }
  return dispatch_when_free();
}

}  // namespace actortrain
