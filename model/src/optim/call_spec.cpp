#include "call_spec.hpp"
#include "join.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace actortrain::model::detail {

namespace {

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

bool is_value_char(char c) {
  return !std::isspace(static_cast<unsigned char>(c)) && c != ',' && c != '(' && c != ')' &&
         c != '=';
}

class parser {
 public:
  parser(const std::string& text, const char* what) : text_(text), what_(what) {}

  call_spec run() {
    call_spec out;
    skip_space();
    if (pos_ >= text_.size()) fail("empty spec");
    if (!is_ident_start(text_[pos_])) fail(fmt::format("expected a name, found {}", here()));
    out.name = ident();
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      skip_space();
      if (peek() != ')') {
        for (;;) {
          out.args.push_back(argument());
          skip_space();
          if (peek() == ',') {
            ++pos_;
            skip_space();
            if (peek() == ')') break;  // trailing comma, as Python allows
            continue;
          }
          if (peek() == ')') break;
          fail(fmt::format("expected ',' or ')', found {}", here()));
        }
      }
      ++pos_;  // ')'
      skip_space();
    }
    if (pos_ < text_.size()) fail(fmt::format("unexpected {} after the spec", here()));
    return out;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  std::string here() const {
    if (pos_ >= text_.size()) return "the end";
    size_t end = pos_ + 1;
    while (end < text_.size() && is_value_char(text_[end]) && is_value_char(text_[pos_])) ++end;
    return fmt::format("'{}' at position {}", text_.substr(pos_, end - pos_), pos_);
  }

  std::string ident() {
    const size_t begin = pos_;
    while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }

  std::string value() {
    const size_t begin = pos_;
    while (pos_ < text_.size() && is_value_char(text_[pos_])) ++pos_;
    if (pos_ == begin) fail(fmt::format("expected a value, found {}", here()));
    return text_.substr(begin, pos_ - begin);
  }

  std::pair<std::string, std::string> argument() {
    // key=value or a positional value; a key is an identifier followed by '='.
    const size_t begin = pos_;
    if (is_ident_start(peek())) {
      std::string key = ident();
      skip_space();
      if (peek() == '=') {
        ++pos_;
        skip_space();
        return {std::move(key), value()};
      }
      pos_ = begin;
    }
    return {std::string(), value()};
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw std::invalid_argument(fmt::format("{}: bad spec '{}': {}", what_, text_, problem));
  }

  const std::string& text_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

call_spec parse_call_spec(const std::string& text, const char* what) {
  return parser(text, what).run();
}

std::vector<std::pair<std::string, std::string>>
bind_args(const call_spec& spec, const std::vector<std::string>& names, const std::string& text,
          const char* what) {
  std::vector<std::pair<std::string, std::string>> out;
  bool seen_keyword = false;
  size_t positional = 0;
  for (const auto& [key, token] : spec.args) {
    std::string name = key;
    if (name.empty()) {
      if (seen_keyword)
        throw std::invalid_argument(fmt::format(
          "{}: bad spec '{}': positional argument '{}' after a keyword argument", what, text,
          token));
      if (positional >= names.size())
        throw std::invalid_argument(
          fmt::format("{}: bad spec '{}': too many arguments ('{}'); {} takes {}: {}", what, text,
                      token, spec.name, names.size(), detail::join(names)));
      name = names[positional++];
    } else {
      seen_keyword = true;
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        auto sorted = names;
        std::sort(sorted.begin(), sorted.end());
        throw std::invalid_argument(fmt::format("{}: bad spec '{}': {} has no parameter '{}' "
                                                "(known: {})",
                                                what, text, spec.name, name,
                                                detail::join(sorted)));
      }
    }
    for (const auto& [done, ignored] : out)
      if (done == name)
        throw std::invalid_argument(
          fmt::format("{}: bad spec '{}': '{}' given twice", what, text, name));
    out.emplace_back(std::move(name), token);
  }
  return out;
}

double parse_value(const std::string& token, const std::string& arg, const std::string& text,
                   const char* what) {
  if (token == "true" || token == "True") return 1.0;
  if (token == "false" || token == "False") return 0.0;
  const char* begin = token.data();
  const char* end = token.data() + token.size();
  if (begin != end && *begin == '+') ++begin;
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end)
    throw std::invalid_argument(
      fmt::format("{}: bad spec '{}': bad value '{}' for {} (expected a number or true/false)",
                  what, text, token, arg));
  return value;
}

}  // namespace actortrain::model::detail
