#include "flags.hpp"

#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

namespace actortrain::tools {

flags::flags(std::string program, std::string summary)
  : program_(std::move(program)), summary_(std::move(summary)) {}

flags& flags::add_option(const std::string& name, option o) {
  if (!options_.emplace(name, std::move(o)).second) throw std::logic_error("flag defined twice: " + name);
  order_.push_back(name);
  return *this;
}

namespace {

template <class T>
T parse_integer(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw usage_error(fmt::format("--{}: '{}' is not an integer", flag, v));
  if constexpr (std::is_unsigned_v<T>) {
    if (x < 0) throw usage_error(fmt::format("--{}: '{}' must not be negative", flag, v));
  }
  if (x < static_cast<long long>(std::numeric_limits<T>::min()) ||
      (x > 0 && static_cast<unsigned long long>(x) > static_cast<unsigned long long>(std::numeric_limits<T>::max())))
    throw usage_error(fmt::format("--{}: '{}' is out of range", flag, v));
  return static_cast<T>(x);
}

}  // namespace

flags& flags::add(const std::string& name, std::string& t, const std::string& help) {
  return add_option(name, {help, t.empty() ? "" : t, false, [&t](const std::string& v) { t = v; }});
}
flags& flags::add(const std::string& name, int64_t& t, const std::string& help) {
  return add_option(name, {help, std::to_string(t), false,
                           [&t, name](const std::string& v) { t = parse_integer<int64_t>(name, v); }});
}
flags& flags::add(const std::string& name, int& t, const std::string& help) {
  return add_option(name, {help, std::to_string(t), false,
                           [&t, name](const std::string& v) { t = parse_integer<int>(name, v); }});
}
flags& flags::add(const std::string& name, uint64_t& t, const std::string& help) {
  return add_option(name, {help, std::to_string(t), false,
                           [&t, name](const std::string& v) { t = parse_integer<uint64_t>(name, v); }});
}
flags& flags::add(const std::string& name, double& t, const std::string& help) {
  return add_option(name, {help, fmt::format("{}", t), false, [&t, name](const std::string& v) {
                             errno = 0;
                             char* end = nullptr;
                             double x = std::strtod(v.c_str(), &end);
                             if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
                               throw usage_error(fmt::format("--{}: '{}' is not a number", name, v));
                             t = x;
                           }});
}
flags& flags::add(const std::string& name, bool& t, const std::string& help) {
  return add_option(name, {help, t ? "on" : "off", true, [&t, name](const std::string& v) {
                             if (v.empty() || v == "true" || v == "1" || v == "on") t = true;
                             else if (v == "false" || v == "0" || v == "off") t = false;
                             else throw usage_error(fmt::format("--{}: '{}' is not on/off", name, v));
                           }});
}

std::string flags::help() const {
  std::string s = fmt::format("usage: {} [flags]\n\n{}\n\nflags:\n", program_, summary_);
  for (auto& name : order_) {
    const auto& o = options_.at(name);
    std::string left = o.is_bool ? fmt::format("--{}", name) : fmt::format("--{}=VALUE", name);
    s += fmt::format("  {:<26} {}", left, o.help);
    if (!o.default_text.empty()) s += fmt::format(" (default: {})", o.default_text);
    s += '\n';
  }
  s += fmt::format("  {:<26} {}\n", "-h, --help", "print this help and exit");
  return s;
}

bool flags::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << help();
      return false;
    }
    if (a == "--") {
      for (++i; i < argc; ++i) positional_.emplace_back(argv[i]);
      break;
    }
    if (a.rfind("--", 0) != 0) {
      if (a.size() > 1 && a[0] == '-') throw usage_error(fmt::format("unknown flag '{}' (see --help)", a));
      positional_.push_back(a);
      continue;
    }
    auto eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    auto it = options_.find(name);
    if (it == options_.end()) throw usage_error(fmt::format("unknown flag '--{}' (see --help)", name));
    if (eq != std::string::npos) {
      it->second.set(a.substr(eq + 1));
    } else if (it->second.is_bool) {
      it->second.set("");
    } else {
      if (i + 1 >= argc) throw usage_error(fmt::format("--{} needs a value", name));
      it->second.set(argv[++i]);
    }
  }
  return true;
}

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

}  // namespace actortrain::tools
