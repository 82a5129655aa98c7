#include "test_util.hpp"

#include <boost/test/unit_test.hpp>

using namespace actortrain::dataset;
using namespace actortrain::dataset::test;

namespace {

bool mentions(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(csv)

BOOST_AUTO_TEST_CASE(header_names_columns_and_labels_are_separated) {
  temp_dir dir;
  write_file(dir.file("train.csv"), "age,fare,survived\n22,7.25,0\n38,71.5,1\r\n\n26,-7.9e1,1\n");
  csv_options opt;
  opt.label_columns = {"survived"};
  auto all = collect(from_csv(dir.file("train.csv"), opt));
  BOOST_REQUIRE_EQUAL(all.size(), 3u);
  BOOST_TEST(all[0].features[0].cols() == 2);
  BOOST_TEST(all[1].features[0](0, 1) == 71.5f);
  BOOST_TEST(all[2].features[0](0, 1) == -79.0f);
  BOOST_TEST(all[1].labels(0, 0) == 1.0f);
  BOOST_TEST(from_csv(dir.file("train.csv"), opt).describe() == "csv(train.csv)");
}

BOOST_AUTO_TEST_CASE(columns_are_selected_by_name_in_the_given_order) {
  temp_dir dir;
  write_file(dir.file("t.csv"), "a;b;\"c d\";e\n1;2;3;4\n5;6;7;8\n");
  csv_options opt;
  opt.delimiter = ';';
  opt.feature_columns = {"e", "a"};
  opt.label_columns = {"c d", "b"};
  auto all = collect(from_csv(dir.file("t.csv"), opt).batch(2));
  BOOST_REQUIRE_EQUAL(all.size(), 1u);
  BOOST_TEST(all[0].features[0](0, 0) == 4.0f);
  BOOST_TEST(all[0].features[0](1, 1) == 5.0f);
  BOOST_TEST(all[0].labels(1, 0) == 7.0f);
  BOOST_TEST(all[0].labels(1, 1) == 6.0f);
}

BOOST_AUTO_TEST_CASE(without_header_columns_are_indices) {
  temp_dir dir;
  write_file(dir.file("n.csv"), "1, 2, 3\n4, 5, 6\n");
  csv_options opt;
  opt.header = false;
  opt.label_columns = {"0"};
  auto all = collect(from_csv(dir.file("n.csv"), opt));
  BOOST_REQUIRE_EQUAL(all.size(), 2u);
  BOOST_TEST(all[1].labels(0, 0) == 4.0f);
  BOOST_TEST(all[1].features[0](0, 1) == 6.0f);
  opt.label_columns = {"3"};
  auto msg = error_of([&] { from_csv(dir.file("n.csv"), opt); });
  BOOST_TEST(mentions(msg, "column 3 is out of range: the file has 3 columns"), msg);
  opt.label_columns = {"age"};
  msg = error_of([&] { from_csv(dir.file("n.csv"), opt); });
  BOOST_TEST(mentions(msg, "column 'age' is not a 0-based column index"), msg);
}

BOOST_AUTO_TEST_CASE(missing_column_is_an_error_listing_the_columns) {
  temp_dir dir;
  write_file(dir.file("train.csv"), "age,fare\n1,2\n");
  csv_options opt;
  opt.label_columns = {"survived"};
  auto msg = error_of([&] { from_csv(dir.file("train.csv"), opt); });
  BOOST_TEST(msg == dir.file("train.csv") + ":1: no column 'survived' in the header (columns: age, fare)");
  BOOST_CHECK_THROW(from_csv(dir.file("train.csv"), opt), file_error);
}

BOOST_AUTO_TEST_CASE(non_numeric_cell_names_file_line_and_column) {
  temp_dir dir;
  write_file(dir.file("train.csv"), "age,fare\n1,2\n\nabc,3\n");
  auto msg = error_of([&] { from_csv(dir.file("train.csv")); });
  BOOST_TEST(msg == dir.file("train.csv") + ":4: column 'age': 'abc' is not a number");
  try {
    from_csv(dir.file("train.csv"));
  } catch (const file_error& e) {
    BOOST_TEST(e.line() == 4);
    BOOST_TEST(e.path() == dir.file("train.csv"));
  }
  write_file(dir.file("empty_cell.csv"), "age,fare\n1,\n");
  msg = error_of([&] { from_csv(dir.file("empty_cell.csv")); });
  BOOST_TEST(mentions(msg, ":2: column 'fare': empty cell"), msg);
  write_file(dir.file("partial.csv"), "age\n12x\n");
  msg = error_of([&] { from_csv(dir.file("partial.csv")); });
  BOOST_TEST(mentions(msg, ":2: column 'age': '12x' is not a number"), msg);
}

BOOST_AUTO_TEST_CASE(ragged_row_is_an_error) {
  temp_dir dir;
  write_file(dir.file("r.csv"), "a,b,c\n1,2,3\n4,5\n");
  auto msg = error_of([&] { from_csv(dir.file("r.csv")); });
  BOOST_TEST(msg == dir.file("r.csv") + ":3: expected 3 columns (as in the header), found 2");
}

BOOST_AUTO_TEST_CASE(unterminated_quote_and_missing_file_are_errors) {
  temp_dir dir;
  write_file(dir.file("q.csv"), "a,\"b\n1,2\n");
  auto msg = error_of([&] { from_csv(dir.file("q.csv")); });
  BOOST_TEST(mentions(msg, ":1: field 2 has an unterminated quote"), msg);
  msg = error_of([&] { from_csv(dir.file("absent.csv")); });
  BOOST_TEST(mentions(msg, dir.file("absent.csv") + ": cannot open"), msg);
  write_file(dir.file("empty.csv"), "");
  BOOST_CHECK_THROW(from_csv(dir.file("empty.csv")), file_error);
}

BOOST_AUTO_TEST_CASE(id_columns_are_64_bit_integers_or_hashes_of_their_text) {
  temp_dir dir;
  write_file(dir.file("c.csv"), "user,price,item,click\n1099511627776,2.5,-3,1\n+9223372036854775807,1,42,0\n");
  csv_options opt;
  opt.label_columns = {"click"};
  opt.id_columns = {"user", "item"};
  auto all = collect(from_csv(dir.file("c.csv"), opt));
  BOOST_REQUIRE_EQUAL(all.size(), 2u);
  // Features first (price alone: id columns are no default features), then the ids.
  BOOST_TEST(all[0].features.size() == 2u);
  BOOST_TEST(all[0].features[0].cols() == 1);
  BOOST_TEST(all[0].features[0](0, 0) == 2.5f);
  BOOST_REQUIRE(all[0].is_ids(1));
  BOOST_TEST(all[0].ids[1](0, 0) == int64_t{1} << 40);
  BOOST_TEST(all[0].ids[1](0, 1) == -3);
  BOOST_TEST(all[1].ids[1](0, 0) == std::numeric_limits<int64_t>::max());
  BOOST_TEST(all[1].ids[1](0, 1) == 42);
  auto msg = error_of([&] {
    write_file(dir.file("bad.csv"), "user,price,item,click\n12,1,4.5,0\n");
    from_csv(dir.file("bad.csv"), opt);
  });
  BOOST_TEST(mentions(msg, "bad.csv:2: column 'item': '4.5' is not an integer id"), msg);
  msg = error_of([&] {
    write_file(dir.file("big.csv"), "user,price,item,click\n9223372036854775808,1,4,0\n");
    from_csv(dir.file("big.csv"), opt);
  });
  BOOST_TEST(mentions(msg, "big.csv:2: column 'user': '9223372036854775808' is out of range for a 64-bit id"), msg);
  // Hashed: text becomes ids >= 0; equal text in two columns gives two ids.
  write_file(dir.file("h.csv"), "a,b,y\nff01,ff01,1\nzz,ff01,0\n");
  csv_options hashed;
  hashed.label_columns = {"y"};
  hashed.id_columns = {"a", "b"};
  hashed.hash_ids = true;
  auto h = collect(from_csv(dir.file("h.csv"), hashed));
  BOOST_REQUIRE_EQUAL(h.size(), 2u);
  BOOST_TEST(h[0].features.size() == 1u);  // ids alone: input 0
  BOOST_REQUIRE(h[0].is_ids(0));
  BOOST_TEST(h[0].ids[0](0, 0) >= 0);
  BOOST_TEST(h[0].ids[0](0, 0) != h[0].ids[0](0, 1));
  BOOST_TEST(h[0].ids[0](0, 1) == h[1].ids[0](0, 1));
  BOOST_TEST(h[0].ids[0](0, 0) != h[1].ids[0](0, 0));
}

BOOST_AUTO_TEST_SUITE_END()
