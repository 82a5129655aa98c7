#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/errors.hpp>
#include <actortrain/actors/core/messages.hpp>
#include <actortrain/model/fpu.hpp>

#include <caf/io/middleman.hpp>
#include <caf/thread_hook.hpp>

#include <stdexcept>
#include <typeindex>

namespace actortrain {

namespace {

class flush_to_zero_hook : public caf::thread_hook {
 public:
  void init(caf::actor_system&) override {}
  void thread_started() override { model::enable_flush_to_zero(); }
  void thread_terminates() override {}
};

std::string render_error(uint8_t code, caf::atom_value, const caf::message& ctx) {
  std::string s = to_string(static_cast<error_code>(code));
  if (ctx.size() == 1 && ctx.match_element<std::string>(0)) s += ": " + ctx.get_as<std::string>(0);
  return s;
}

// configure() registered our types on this config: the fence type stands for all.
bool has_our_types(const caf::actor_system_config& cfg) {
  return cfg.type_names_by_rtti.count(std::type_index(typeid(fence))) > 0;
}

}  // namespace

void configure(caf::actor_system_config& cfg, const configure_options& opts) {
  if (has_our_types(cfg)) throw std::logic_error("actortrain::configure called twice on one actor_system_config");
  cfg.add_message_types<caf::id_block::actortrain>();
  cfg.add_error_category(caf::atom("actortrain"), render_error);
  if (opts.flush_to_zero) cfg.add_thread_hook<flush_to_zero_hook>();
  if (opts.load_middleman) cfg.load<caf::io::middleman>();
  if (opts.sleep_when_idle) cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

bool is_configured(const caf::actor_system& sys) { return has_our_types(sys.config()); }

}  // namespace actortrain
