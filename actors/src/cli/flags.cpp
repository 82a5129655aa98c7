// CAF-free (tests/tools/layers.sh): no CAF header, directly or through an include.
// The command-line layer (cli/flags.hpp) on CLI11. CLI11 finds the flags, their values
// in both spellings, the repeated ones, and writes --help; the conversions, ranges and
// the wording of every error are ours, so that each names its flag the same way. Why
// CLI11 and not CAF's own configuration: most of our programs start no actor system
// (bench, plot, inspect, the local examples), and CAF's parser takes booleans only as
// --flag, reads caf-application.ini from the working directory without being asked,
// and would put CAF's compile cost into every tool; a run_node program still hands
// --caf.* flags to CAF (pass_caf_options).
#include <actortrain/actors/cli/flags.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <set>

namespace actortrain::cli {

namespace {

// The value of --NAME as text, checked and stored into the caller's variable.
using setter = std::function<void(const std::string& value)>;

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& why) {
  throw usage_error(fmt::format("--{}: '{}' {}", name, value, why));
}

template <class T>
T to_integer(const std::string& name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  bool negative = !v.empty() && v[0] == '-';
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) bad(name, v, "is not an integer");
  if constexpr (std::is_unsigned_v<T>) {
    if (negative) bad(name, v, "must not be negative");
    unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (*end != '\0') bad(name, v, "is not an integer");
    if (errno == ERANGE || x > std::numeric_limits<T>::max()) bad(name, v, "is out of range");
    return static_cast<T>(x);
  } else {
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (*end != '\0') bad(name, v, "is not an integer");
    if (errno == ERANGE || x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
      bad(name, v, "is out of range");
    return static_cast<T>(x);
  }
}

double to_double(const std::string& name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) bad(name, v, "is not a number");
  double x = std::strtod(v.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(x)) bad(name, v, "is not a number");
  return x;
}

bool to_bool(const std::string& name, const std::string& v) {
  if (v == "true" || v == "1" || v == "on" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "off" || v == "no") return false;
  bad(name, v, "is not on/off");
}

// `text` in lines of at most `width` characters, broken between words (CLI11 indents
// the lines after the first under the first).
std::string wrap(const std::string& text, size_t width) {
  std::string out, line, word;
  auto flush_word = [&] {
    if (word.empty()) return;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + '\n';
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == '\n') {
      flush_word();
      if (c == '\n') {
        out += line + '\n';
        line.clear();
      }
    } else {
      word += c;
    }
  }
  flush_word();
  return out + line;
}

template <class T>
std::string range_text(const std::optional<range<T>>& r) {
  return r ? fmt::format("; {} to {}", r->min, r->max) : std::string{};
}

}  // namespace

struct flags::impl {
  struct option {
    std::string name;
    bool is_bool = false;
    setter set;
    std::string text;  // what CLI11 found
    CLI::Option* cli = nullptr;
  };
  std::string program;
  CLI::App app;
  std::vector<std::unique_ptr<option>> options;  // stable addresses: CLI11 writes into `text`
  std::set<std::string> given;
  std::vector<std::string> positional;
  std::vector<std::string>* caf = nullptr;  // pass_caf_options' target

  impl(std::string prog, std::string summary) : program(std::move(prog)), app(std::move(summary), program) {
    app.option_defaults()->group("Flags");
    app.set_help_flag("-h,--help", "print this help and exit");
    app.allow_extras();  // unknown flags and positionals are sorted out after parsing
    app.get_formatter()->column_width(30);
    app.get_formatter()->label("OPTIONS", "FLAGS");
  }

  flags& add(flags& self, const std::string& name, bool is_bool, std::string help, std::string default_text,
             setter set) {
    for (auto& o : options)
      if (o->name == name) throw std::logic_error("flag defined twice: --" + name);
    auto o = std::make_unique<option>();
    o->name = name;
    o->is_bool = is_bool;
    o->set = std::move(set);
    if (!default_text.empty()) help += " (default: " + default_text + ")";
    help = wrap(help, 66);
    if (is_bool)
      o->cli = app.add_flag("--" + name, o->text, help);
    else
      o->cli = app.add_option("--" + name, o->text, help)->type_name("VALUE");
    o->cli->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    options.push_back(std::move(o));
    return self;
  }
};

flags::flags(std::string program, std::string summary)
  : impl_(std::make_unique<impl>(std::move(program), std::move(summary))) {}
flags::~flags() = default;
flags::flags(flags&&) noexcept = default;
flags& flags::operator=(flags&&) noexcept = default;

flags& flags::add(const std::string& name, std::string& t, const std::string& help) {
  return impl_->add(*this, name, false, help, t, [&t](const std::string& v) { t = v; });
}

flags& flags::add(const std::string& name, bool& t, const std::string& help) {
  return impl_->add(*this, name, true, help, t ? "on" : "off",
                    [&t, name](const std::string& v) { t = to_bool(name, v); });
}

namespace {

// The setter of a numeric flag: converted by `conv`, then checked against `r`.
template <class T, class Conv>
setter numeric(const std::string& name, T& t, std::optional<range<T>> r, Conv conv) {
  return [&t, name, r, conv](const std::string& v) {
    T x = conv(name, v);
    if (r && (x < r->min || x > r->max)) bad(name, v, fmt::format("is out of range ({} to {})", r->min, r->max));
    t = x;
  };
}

}  // namespace

flags& flags::add(const std::string& name, int& t, const std::string& help, std::optional<range<int>> r) {
  return impl_->add(*this, name, false, help, std::to_string(t) + range_text(r), numeric(name, t, r, to_integer<int>));
}

flags& flags::add(const std::string& name, int64_t& t, const std::string& help, std::optional<range<int64_t>> r) {
  return impl_->add(*this, name, false, help, std::to_string(t) + range_text(r),
                    numeric(name, t, r, to_integer<int64_t>));
}

flags& flags::add(const std::string& name, uint64_t& t, const std::string& help, std::optional<range<uint64_t>> r) {
  return impl_->add(*this, name, false, help, std::to_string(t) + range_text(r),
                    numeric(name, t, r, to_integer<uint64_t>));
}

flags& flags::add(const std::string& name, double& t, const std::string& help, std::optional<range<double>> r) {
  return impl_->add(*this, name, false, help, fmt::format("{}", t) + range_text(r), numeric(name, t, r, to_double));
}

flags& flags::add_choice(const std::string& name, std::string& t, const std::string& help,
                         std::vector<std::string> choices) {
  auto list = fmt::format("{}", fmt::join(choices, ", "));
  std::string text = t.empty() ? "one of " + list : t + "; one of " + list;
  return impl_->add(*this, name, false, help, text, [&t, name, choices, list](const std::string& v) {
    for (auto& c : choices)
      if (v == c) {
        t = v;
        return;
      }
    bad(name, v, "is not one of " + list);
  });
}

flags& flags::add_parsed(const std::string& name, const std::string& default_text, const std::string& help,
                         std::function<void(const std::string&)> parse) {
  return impl_->add(*this, name, false, help, default_text, [name, parse](const std::string& v) {
    try {
      parse(v);
    } catch (const std::invalid_argument& e) {
      throw usage_error(fmt::format("--{}: {}", name, e.what()));
    }
  });
}

flags& flags::pass_caf_options(std::vector<std::string>& target) {
  impl_->caf = &target;
  return *this;
}

flags& flags::footer(std::string text) {
  impl_->app.footer(std::move(text));
  return *this;
}

bool flags::parse(int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

bool flags::parse(const std::vector<std::string>& all) {
  auto& m = *impl_;
  // What follows `--` is positional whatever it looks like (a job's own flags): CLI11
  // never sees it.
  std::vector<std::string> args;
  std::vector<std::string> after;
  bool rest = false;
  for (auto& a : all) {
    if (rest)
      after.push_back(a);
    else if (a == "--")
      rest = true;
    else
      args.push_back(a);
  }
  // A boolean given an empty value (--quiet=): CLI11 would take it for the bare flag.
  for (auto& a : args)
    for (auto& o : m.options)
      if (o->is_bool && a == "--" + o->name + "=") bad(o->name, "", "is not on/off");
  // A flag that takes a value, written last or followed by another flag: CLI11 would
  // take the next flag for its value.
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0 || args[i].find('=') != std::string::npos) continue;
    for (auto& o : m.options)
      if (!o->is_bool && args[i] == "--" + o->name &&
          (i + 1 == args.size() || (args[i + 1].rfind("--", 0) == 0 && args[i + 1].size() > 2)))
        throw usage_error(args[i] + " needs a value");
  }
  // CLI11 wants the arguments last to first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    m.app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << help();
    return false;
  } catch (const CLI::ArgumentMismatch& e) {
    // "--epochs: 1 required VALUE missing": the flag came last, or before another flag.
    std::string what = e.what();
    throw usage_error(what.substr(0, what.find(':')) + " needs a value");
  } catch (const CLI::ParseError& e) {
    throw usage_error(e.what());
  }
  for (auto& r : m.app.remaining()) {
    bool looks_like_flag = r.size() > 1 && r[0] == '-' && !std::isdigit(static_cast<unsigned char>(r[1])) && r[1] != '.';
    if (!looks_like_flag) {
      m.positional.push_back(r);
      continue;
    }
    if (m.caf && r.rfind("--caf.", 0) == 0) {
      if (r.find('=') == std::string::npos || r.size() <= 6)
        throw usage_error(fmt::format("'{}': CAF options are written --caf.NAME=VALUE", r));
      m.caf->push_back(r);
      continue;
    }
    throw usage_error(fmt::format("unknown flag '{}' (see --help)", r.substr(0, r.find('='))));
  }
  for (auto& o : m.options) {
    if (o->cli->count() == 0) continue;
    m.given.insert(o->name);
    o->set(o->text);
  }
  m.positional.insert(m.positional.end(), after.begin(), after.end());
  return true;
}

const std::vector<std::string>& flags::positional() const { return impl_->positional; }
bool flags::given(const std::string& name) const { return impl_->given.count(name) > 0; }

std::string flags::help() const { return impl_->app.help(); }

int run_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const usage_error& e) {
    std::cerr << program << ": error: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace actortrain::cli
