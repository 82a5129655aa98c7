// The flag parser the examples and the actortrain command share.

#include <boost/test/unit_test.hpp>

#include "flags.hpp"

using actortrain::tools::flags;
using actortrain::tools::usage_error;

namespace {

struct parsed {
  int epochs = 10;
  double lr = 1e-3;
  bool quiet = false;
  std::string name = "x";
  flags f{"prog", "test"};
  parsed() { f.add("epochs", epochs, "e").add("lr", lr, "l").add("quiet", quiet, "q").add("name", name, "n"); }
  bool parse(std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("prog")};
    for (auto& a : args) argv.push_back(a.data());
    return f.parse(static_cast<int>(argv.size()), argv.data());
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(flags_suite)

BOOST_AUTO_TEST_CASE(values_in_both_spellings_and_booleans) {
  parsed p;
  BOOST_TEST(p.parse({"--epochs=3", "--lr", "0.5", "--quiet", "--name=abc", "pos"}));
  BOOST_TEST(p.epochs == 3);
  BOOST_TEST(p.lr == 0.5);
  BOOST_TEST(p.quiet);
  BOOST_TEST(p.name == "abc");
  BOOST_TEST(p.f.positional().size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_flag) {
  auto message = [](std::vector<std::string> args) {
    parsed p;
    try {
      p.parse(args);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(message({"--epochs=ten"}) == "--epochs: 'ten' is not an integer");
  BOOST_TEST(message({"--epochs=99999999999"}) == "--epochs: '99999999999' is out of range");
  BOOST_TEST(message({"--lr=nan"}) == "--lr: 'nan' is not a number");
  BOOST_TEST(message({"--bogus"}) == "unknown flag '--bogus' (see --help)");
  BOOST_TEST(message({"--epochs"}) == "--epochs needs a value");
  BOOST_TEST(message({"--quiet=maybe"}) == "--quiet: 'maybe' is not on/off");
}

BOOST_AUTO_TEST_CASE(help_lists_every_flag_with_its_default) {
  parsed p;
  auto h = p.f.help();
  BOOST_TEST(h.find("--epochs=VALUE") != std::string::npos);
  BOOST_TEST(h.find("(default: 10)") != std::string::npos);
  BOOST_TEST(h.find("--quiet") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
