// The command-line layer every program parses its flags with (cli/flags.hpp).

#include <boost/test/unit_test.hpp>

#include <actortrain/actors/cli/flags.hpp>

using actortrain::cli::flags;
using actortrain::cli::range;
using actortrain::cli::usage_error;

namespace {

struct parsed {
  int epochs = 10;
  double lr = 1e-3;
  bool quiet = false;
  std::string name = "x";
  std::string mode = "async";
  uint64_t seed = 7;
  flags f{"prog", "test"};
  parsed() {
    f.add("epochs", epochs, "e", range<int>{1, 1000})
      .add("lr", lr, "l", range<double>{0, 1})
      .add("quiet", quiet, "q")
      .add("name", name, "n")
      .add_choice("mode", mode, "m", {"async", "sync"})
      .add("seed", seed, "s");
  }
  bool parse(std::vector<std::string> args) { return f.parse(args); }
};

std::string message(std::vector<std::string> args) {
  parsed p;
  try {
    p.parse(args);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cli_flags)

BOOST_AUTO_TEST_CASE(values_in_both_spellings_and_booleans) {
  parsed p;
  BOOST_TEST(p.parse({"--epochs=3", "--lr", "0.5", "--quiet", "--name=abc", "pos", "--mode", "sync"}));
  BOOST_TEST(p.epochs == 3);
  BOOST_TEST(p.lr == 0.5);
  BOOST_TEST(p.quiet);
  BOOST_TEST(p.name == "abc");
  BOOST_TEST(p.mode == "sync");
  BOOST_TEST(p.f.positional() == std::vector<std::string>{"pos"});
  BOOST_TEST(p.f.given("epochs"));
  BOOST_TEST(!p.f.given("seed"));
  BOOST_TEST(p.seed == 7u);  // untouched
}

BOOST_AUTO_TEST_CASE(booleans_take_on_and_off_and_the_last_of_a_repeated_flag_wins) {
  parsed p;
  p.quiet = true;
  BOOST_TEST(p.parse({"--quiet=off", "--epochs=4", "--epochs", "5"}));
  BOOST_TEST(!p.quiet);
  BOOST_TEST(p.epochs == 5);
}

BOOST_AUTO_TEST_CASE(everything_after_the_double_dash_is_positional) {
  parsed p;
  BOOST_TEST(p.parse({"a", "--epochs=2", "--", "--epochs=9", "--bogus", "-x"}));
  BOOST_TEST(p.epochs == 2);
  BOOST_TEST(p.f.positional() == (std::vector<std::string>{"a", "--epochs=9", "--bogus", "-x"}));
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_flag_and_the_allowed_values) {
  BOOST_TEST(message({"--epochs=ten"}) == "--epochs: 'ten' is not an integer");
  BOOST_TEST(message({"--epochs=99999999999"}) == "--epochs: '99999999999' is out of range");
  BOOST_TEST(message({"--epochs=0"}) == "--epochs: '0' is out of range (1 to 1000)");
  BOOST_TEST(message({"--epochs", "-3"}) == "--epochs: '-3' is out of range (1 to 1000)");
  BOOST_TEST(message({"--lr=nan"}) == "--lr: 'nan' is not a number");
  BOOST_TEST(message({"--lr=1.5"}) == "--lr: '1.5' is out of range (0 to 1)");
  BOOST_TEST(message({"--seed=-1"}) == "--seed: '-1' must not be negative");
  BOOST_TEST(message({"--mode=eventual"}) == "--mode: 'eventual' is not one of async, sync");
  BOOST_TEST(message({"--bogus"}) == "unknown flag '--bogus' (see --help)");
  BOOST_TEST(message({"--bogus=1"}) == "unknown flag '--bogus' (see --help)");
  BOOST_TEST(message({"-x"}) == "unknown flag '-x' (see --help)");
  BOOST_TEST(message({"--epochs"}) == "--epochs needs a value");
  BOOST_TEST(message({"--epochs", "--quiet"}) == "--epochs needs a value");
  BOOST_TEST(message({"--quiet=maybe"}) == "--quiet: 'maybe' is not on/off");
  BOOST_TEST(message({"--quiet="}) == "--quiet: '' is not on/off");
  BOOST_TEST(message({"--caf.scheduler.max-threads=2"}) == "unknown flag '--caf.scheduler.max-threads' (see --help)");
}

BOOST_AUTO_TEST_CASE(a_parsed_flag_names_itself_in_its_parsers_refusal) {
  parsed p;
  int twice = 0;
  p.f.add_parsed("double", "0", "d", [&twice](const std::string& v) {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("'" + v + "' is not a count");
    twice = 2 * std::stoi(v);
  });
  BOOST_TEST(p.parse({"--double", "21"}));
  BOOST_TEST(twice == 42);
  parsed q;
  q.f.add_parsed("double", "0", "d", [](const std::string& v) { throw std::invalid_argument("'" + v + "' is bad"); });
  try {
    q.parse({"--double=x"});
    BOOST_FAIL("accepted");
  } catch (const usage_error& e) {
    BOOST_TEST(std::string(e.what()) == "--double: 'x' is bad");
  }
}

BOOST_AUTO_TEST_CASE(a_value_out_of_range_leaves_the_default) {
  parsed p;
  BOOST_CHECK_THROW(p.parse({"--epochs=0"}), usage_error);
  BOOST_TEST(p.epochs == 10);
}

BOOST_AUTO_TEST_CASE(caf_options_pass_through_when_asked_for) {
  parsed p;
  std::vector<std::string> caf;
  p.f.pass_caf_options(caf);
  BOOST_TEST(p.parse({"--caf.scheduler.max-threads=2", "--epochs=3"}));
  BOOST_TEST(caf == std::vector<std::string>{"--caf.scheduler.max-threads=2"});
  BOOST_TEST(p.epochs == 3);
  parsed q;
  q.f.pass_caf_options(caf);
  try {
    q.parse({"--caf.scheduler.max-threads", "2"});
    BOOST_FAIL("a CAF option without =VALUE was accepted");
  } catch (const usage_error& e) {
    BOOST_TEST(std::string(e.what()) == "'--caf.scheduler.max-threads': CAF options are written --caf.NAME=VALUE");
  }
}

BOOST_AUTO_TEST_CASE(help_lists_every_flag_with_its_default_and_range) {
  parsed p;
  auto h = p.f.help();
  BOOST_TEST(h.find("--epochs VALUE") != std::string::npos);
  BOOST_TEST(h.find("(default: 10; 1 to 1000)") != std::string::npos);
  BOOST_TEST(h.find("(default: async; one of async, sync)") != std::string::npos);
  BOOST_TEST(h.find("--quiet") != std::string::npos);
  BOOST_TEST(h.find("-h,--help") != std::string::npos);
  BOOST_TEST(!p.parse({"--epochs=0", "--help"}));  // help wins, nothing is checked
}

BOOST_AUTO_TEST_CASE(run_main_maps_usage_errors_to_2_and_failures_to_1) {
  BOOST_TEST(actortrain::cli::run_main("p", [] { return 0; }) == 0);
  BOOST_TEST(actortrain::cli::run_main("p", []() -> int { throw usage_error("--x: bad"); }) == 2);
  BOOST_TEST(actortrain::cli::run_main("p", []() -> int { throw std::runtime_error("disk full"); }) == 1);
}

BOOST_AUTO_TEST_SUITE_END()
