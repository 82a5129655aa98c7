// The wire format of the messages that carry tensors and row ids between processes:
// a round trip keeps every value (a partition's state with or without its optional kept
// state too), and bytes off the wire that lie about their lengths are refused with an
// error before anything is allocated (never a crash).

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <limits>

#include <actortrain/actors/core/configure.hpp>
#include <actortrain/actors/core/messages.hpp>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <random>

namespace at = actortrain;

namespace {

struct wire_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  wire_fixture() {
    at::configure(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  template <class T>
  std::vector<char> save(T x) {
    std::vector<char> buf;
    caf::binary_serializer out{*sys, buf};
    BOOST_REQUIRE(!out(x));
    return buf;
  }
  template <class T>
  caf::error load(const std::vector<char>& buf, T& x) {
    caf::binary_deserializer in{*sys, buf};
    return in(x);
  }
};

at::sparse_slice sample_slice() {
  at::sparse_slice s;
  s.variable = 3;
  s.read_version = 17;
  s.ids = {0, 5, 1'000'000'007, -1};
  at::model::matrix rows(4, 2);
  rows << 1, 2, 3, 4, 5, 6, 7, 8;
  s.rows = at::tensor{rows};
  return s;
}

// A restored partition with every field set, the kept state included.
at::partition_state sample_state() {
  at::partition_state p;
  p.key = at::partition_key{2, 1};
  p.name = "emb/embeddings";
  p.row_begin = 10;
  p.row_end = 14;
  p.sparse = true;
  p.version = 9;
  p.iterations = 4;
  p.value = at::tensor{at::model::matrix::Random(4, 2)};
  p.slot_names = {"m", "v"};
  p.slots = {at::tensor{at::model::matrix::Random(4, 2)}, at::tensor{at::model::matrix::Random(4, 2)}};
  p.ledger.segments = {at::ledger_segment{1, 0, 3, 7, 0xabcdef}};
  p.ledger.violations = {at::ledger_violation{1, 0, 5, 42}};
  auto& k = p.kept.emplace();
  k.value = at::tensor{at::model::matrix::Random(4, 2)};
  k.slots = {at::tensor{at::model::matrix::Random(4, 2)}};
  k.iterations = 3;
  return p;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(partition_states_round_trip_with_their_kept_state_and_as_written_files, wire_fixture) {
  auto p = sample_state();
  at::init_request req;
  req.partitions = {p};
  at::init_request back;
  BOOST_REQUIRE(!load(save(req), back));
  BOOST_REQUIRE_EQUAL(back.partitions.size(), 1u);
  auto& b = back.partitions[0];
  BOOST_CHECK(b.key == p.key);
  BOOST_CHECK_EQUAL(b.name, p.name);
  BOOST_CHECK_EQUAL(b.row_begin, 10);
  BOOST_CHECK_EQUAL(b.row_end, 14);
  BOOST_CHECK(b.sparse);
  BOOST_CHECK_EQUAL(b.version, 9u);
  BOOST_CHECK_EQUAL(b.iterations, 4);
  BOOST_REQUIRE(b.value.value);
  BOOST_CHECK(*b.value.value == *p.value.value);
  BOOST_CHECK(b.slot_names == p.slot_names);
  BOOST_REQUIRE_EQUAL(b.slots.size(), 2u);
  BOOST_CHECK(*b.slots[1].value == *p.slots[1].value);
  BOOST_REQUIRE_EQUAL(b.ledger.segments.size(), 1u);
  BOOST_CHECK_EQUAL(b.ledger.segments[0].checksum, 0xabcdefu);
  BOOST_REQUIRE_EQUAL(b.ledger.violations.size(), 1u);
  BOOST_CHECK_EQUAL(b.ledger.violations[0].digest, 42u);
  BOOST_REQUIRE(b.kept);
  BOOST_REQUIRE(b.kept->value.value);
  BOOST_CHECK(*b.kept->value.value == *p.kept->value.value);
  BOOST_REQUIRE_EQUAL(b.kept->slots.size(), 1u);
  BOOST_CHECK(*b.kept->slots[0].value == *p.kept->slots[0].value);
  BOOST_CHECK_EQUAL(b.kept->iterations, 3);

  // Without a kept state it comes back without one, even into a state that held one.
  auto plain = sample_state();
  plain.kept.reset();
  auto plain_back = sample_state();
  BOOST_REQUIRE(!load(save(plain), plain_back));
  BOOST_CHECK(!plain_back.kept);
  BOOST_CHECK(*plain_back.value.value == *plain.value.value);

  // A written partition: the state's fields without tensors, and the files.
  at::ps_files files;
  files.shard = 3;
  at::written_partition w;
  w.header = sample_state();
  w.header.value = {};
  w.header.slots.clear();
  w.header.kept.reset();
  w.values = at::file_entry{"emb-1.values", 32, 0xdeadbeef};
  w.slots = {at::file_entry{"emb-1.m", 32, 1}, at::file_entry{"emb-1.v", 32, 2}};
  files.partitions = {w};
  at::ps_files files_back;
  BOOST_REQUIRE(!load(save(files), files_back));
  BOOST_CHECK_EQUAL(files_back.shard, 3u);
  BOOST_REQUIRE_EQUAL(files_back.partitions.size(), 1u);
  auto& wb = files_back.partitions[0];
  BOOST_CHECK(wb.header.key == w.header.key);
  BOOST_CHECK_EQUAL(wb.header.row_end, 14);
  BOOST_CHECK(wb.header.slot_names == w.header.slot_names);
  BOOST_CHECK(!wb.header.value.value);
  BOOST_CHECK(!wb.header.kept);
  BOOST_CHECK_EQUAL(wb.values.name, "emb-1.values");
  BOOST_CHECK_EQUAL(wb.values.crc32, 0xdeadbeefu);
  BOOST_REQUIRE_EQUAL(wb.slots.size(), 2u);
  BOOST_CHECK_EQUAL(wb.slots[1].name, "emb-1.v");
  BOOST_CHECK_EQUAL(wb.slots[1].crc32, 2u);
}

BOOST_FIXTURE_TEST_CASE(sparse_slices_and_row_pulls_round_trip, wire_fixture) {
  auto s = sample_slice();
  at::sparse_slice back;
  BOOST_REQUIRE(!load(save(s), back));
  BOOST_CHECK(back.ids == s.ids);
  BOOST_CHECK_EQUAL(back.variable, 3);
  BOOST_CHECK_EQUAL(back.read_version, 17u);
  BOOST_REQUIRE(back.rows.value);
  BOOST_CHECK(*back.rows.value == *s.rows.value);

  at::pull_rows_request req;
  req.f.coordinator_epoch = 4;
  req.variable = 1;
  req.ids.resize(100000);
  std::mt19937_64 gen{1};
  for (auto& id : req.ids) id = static_cast<int64_t>(gen() >> 1);
  at::pull_rows_request req_back;
  BOOST_REQUIRE(!load(save(req), req_back));
  BOOST_CHECK(req_back.ids == req.ids);
  BOOST_CHECK_EQUAL(req_back.f.coordinator_epoch, 4u);

  at::rows_reply empty;  // no ids, no rows
  at::rows_reply empty_back;
  empty_back.ids = {9};
  BOOST_REQUIRE(!load(save(empty), empty_back));
  BOOST_CHECK(empty_back.ids.empty());
  BOOST_CHECK(!empty_back.rows.value);
}

BOOST_FIXTURE_TEST_CASE(push_requests_round_trip, wire_fixture) {
  at::push_request p;
  p.f.worker = 2;
  p.step = at::step_id{1, 0, 42};
  p.example_count = 128;
  at::model::matrix g = at::model::matrix::Random(30, 7);
  p.dense.push_back(at::dense_slice{at::partition_key{0, 1}, 5, at::tensor{g}});
  p.sparse.push_back(sample_slice());
  p.watermark = {3, 4};
  p.more_steps = {at::step_id{1, 0, 43}};
  p.digests = {0x0123456789abcdefull, 77};
  at::push_request back;
  BOOST_REQUIRE(!load(save(p), back));
  BOOST_CHECK(back.step == p.step);
  BOOST_CHECK_EQUAL(back.example_count, 128);
  BOOST_REQUIRE_EQUAL(back.dense.size(), 1u);
  BOOST_CHECK(*back.dense[0].grad.value == g);
  BOOST_REQUIRE_EQUAL(back.sparse.size(), 1u);
  BOOST_CHECK(back.sparse[0].ids == p.sparse[0].ids);
  BOOST_CHECK(back.watermark == p.watermark);
  BOOST_CHECK(back.digests == p.digests);
}

BOOST_FIXTURE_TEST_CASE(batches_carry_their_64_bit_ids_and_a_shape_that_lies_is_refused, wire_fixture) {
  at::batch_reply r;
  r.step = at::step_id{1, 0, 9};
  r.batch.features = {at::tensor{at::model::matrix(3, 0)}, at::tensor{at::model::matrix::Random(3, 2)}};
  r.batch.labels = at::tensor{at::model::matrix::Ones(3, 1)};
  r.batch.ids.resize(1);
  r.batch.ids[0].rows = 3;
  r.batch.ids[0].cols = 2;
  r.batch.ids[0].values = {0, 1, (int64_t{1} << 40) + 5, std::numeric_limits<int64_t>::max(), -7, 1 << 24};
  at::batch_reply back;
  BOOST_REQUIRE(!load(save(r), back));
  BOOST_REQUIRE_EQUAL(back.batch.ids.size(), 1u);
  BOOST_CHECK_EQUAL(back.batch.ids[0].rows, 3u);
  BOOST_CHECK_EQUAL(back.batch.ids[0].cols, 2u);
  BOOST_CHECK(back.batch.ids[0].values == r.batch.ids[0].values);
  BOOST_CHECK_EQUAL(back.batch.features[0].value->rows(), 3);
  // 3 x 2 announced over 5 ids, and 2^62 x 4 (whose product wraps to 0) over none.
  auto lie = r;
  lie.batch.ids[0].values.pop_back();
  at::batch_reply refused;
  auto err = load(save(lie), refused);
  BOOST_CHECK(err);
  BOOST_CHECK(to_string(err).find("id_block: the shape does not match the ids sent") != std::string::npos);
  lie.batch.ids[0].rows = uint64_t{1} << 62;
  lie.batch.ids[0].cols = 4;
  lie.batch.ids[0].values.clear();
  BOOST_CHECK(load(save(lie), refused));
  lie.batch.ids[0].rows = 0;  // no rows of 2^63 columns
  lie.batch.ids[0].cols = uint64_t{1} << 63;
  BOOST_CHECK(load(save(lie), refused));
}

BOOST_FIXTURE_TEST_CASE(truncated_messages_are_refused, wire_fixture) {
  auto buf = save(sample_slice());
  // Every cut, from one byte short to nothing left, fails cleanly.
  for (size_t keep = 0; keep < buf.size(); ++keep) {
    std::vector<char> cut(buf.begin(), buf.begin() + static_cast<long>(keep));
    at::sparse_slice back;
    BOOST_CHECK_MESSAGE(load(cut, back), "a message cut to " << keep << " of " << buf.size() << " bytes was accepted");
  }
  // The same for a partition state, whose last field is the optional kept state: a cut
  // before its flag, inside it or after the flag says there is one fails too.
  auto state = save(sample_state());
  for (size_t keep = 0; keep < state.size(); ++keep) {
    std::vector<char> cut(state.begin(), state.begin() + static_cast<long>(keep));
    at::partition_state back;
    BOOST_CHECK_MESSAGE(load(cut, back), "a state cut to " << keep << " of " << state.size() << " bytes was accepted");
  }
}

BOOST_FIXTURE_TEST_CASE(crafted_lengths_are_refused_before_allocating, wire_fixture) {
  // A pull_rows_request whose id count announces 2^40 ids in a 64-byte message: refused
  // with an error, without reserving terabytes.
  at::pull_rows_request req;
  req.ids = {1, 2};
  auto buf = save(req);
  at::pull_rows_request probe;
  BOOST_REQUIRE(!load(buf, probe));
  // The id count is the varint-encoded sequence size right before the 16 id bytes, which
  // the one byte of the training flag follows.
  const size_t tail = 2 * sizeof(int64_t) + 1;
  size_t at_count = buf.size() - tail - 1;
  BOOST_REQUIRE_EQUAL(static_cast<unsigned char>(buf[at_count]), 2u);
  std::vector<char> forged(buf.begin(), buf.begin() + static_cast<long>(at_count));
  uint64_t huge = uint64_t{1} << 40;
  while (huge >= 0x80) {  // CAF's varint: 7 bits a byte, high bit = more
    forged.push_back(static_cast<char>((huge & 0x7f) | 0x80));
    huge >>= 7;
  }
  forged.push_back(static_cast<char>(huge));
  forged.insert(forged.end(), buf.end() - static_cast<long>(tail), buf.end());
  at::pull_rows_request back;
  auto err = load(forged, back);
  BOOST_CHECK(err);
  BOOST_CHECK(back.ids.size() < 1000);

  // A tensor announcing more floats than the message holds.
  at::dense_slice d{at::partition_key{0, 0}, 1, at::tensor{at::model::matrix::Ones(2, 2)}};
  auto tb = save(d);
  std::vector<char> short_tb(tb.begin(), tb.end() - 4);
  at::dense_slice dback;
  BOOST_CHECK(load(short_tb, dback));
}

BOOST_FIXTURE_TEST_CASE(hostile_lengths_in_other_message_types_are_refused, wire_fixture) {
  // Every other message type goes through CAF's own containers and strings: an announced
  // length larger than the message must end in an error, with memory bounded by the
  // message (CAF inserts element by element; strings are range-checked).
  auto forge_last_count = [](std::vector<char> buf, size_t tail_bytes, uint8_t old_count) {
    size_t at = buf.size() - tail_bytes - 1;
    BOOST_REQUIRE_EQUAL(static_cast<unsigned char>(buf[at]), old_count);
    std::vector<char> out(buf.begin(), buf.begin() + static_cast<long>(at));
    uint64_t huge = uint64_t{1} << 40;
    while (huge >= 0x80) {
      out.push_back(static_cast<char>((huge & 0x7f) | 0x80));
      huge >>= 7;
    }
    out.push_back(static_cast<char>(huge));
    out.insert(out.end(), buf.end() - static_cast<long>(tail_bytes), buf.end());
    return out;
  };
  at::node_registration reg;
  reg.task = "abc";  // the last field: its length, then 3 bytes
  auto forged = forge_last_count(save(reg), 3, 3);
  at::node_registration back;
  BOOST_CHECK(load(forged, back));
  BOOST_CHECK(back.task.size() < 1000);

  at::run_summary sum;
  // visits: a count of 1, then one visit (8+4+8+4+8 bytes); then two int64 epochs.
  sum.visits.resize(1);
  auto fs = forge_last_count(save(sum), 32 + 16, 1);
  at::run_summary sback;
  BOOST_CHECK(load(fs, sback));
  BOOST_CHECK(sback.visits.size() < 1000);

  at::gate_decision gate;
  gate.hyperparams = {{"lr", 0.1}};  // the last field: a count of 1, then "lr" (1+2 bytes) and a double
  auto fg = forge_last_count(save(gate), 3 + 8, 1);
  at::gate_decision gback;
  BOOST_CHECK(load(fg, gback));
  BOOST_CHECK(gback.hyperparams.size() < 1000);
}

// A sequence of exact values is held to the fewest bytes each element takes on the wire
// (here a string's length byte, one character, a double's 8), not one byte each: a count
// the rest of the message could hold at one byte an element, but not at ten, is refused
// before anything is allocated (with one byte, 30 pairs of 40 bytes were allocated and
// the read failed later, at the fifth).
BOOST_FIXTURE_TEST_CASE(a_count_of_exact_values_is_held_to_their_least_bytes, wire_fixture) {
  at::gate_decision gate;
  gate.hyperparams = {{"a", 1.0}, {"b", 2.0}, {"c", 3.0}, {"d", 4.0}};  // the last field: 4, then 4 x 10 bytes
  auto buf = save(gate);
  auto at = buf.size() - 40 - 1;
  BOOST_REQUIRE_EQUAL(static_cast<int>(buf[at]), 4);
  buf[at] = 30;  // 40 bytes left: room for 30 at one byte each, for 4 at ten
  at::gate_decision back;
  auto err = load(buf, back);
  BOOST_REQUIRE(err);
  BOOST_CHECK_MESSAGE(sys->render(err).find("a sequence longer than the message") != std::string::npos,
                      sys->render(err));
}

namespace {
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
}  // namespace

// Found by fuzzing (tools/fuzzers/messages.cpp): CAF 0.17 writes a double through
// pack754, which never returns for +-infinity, so a diverged loss hung its sender. Every
// floating value of a message now travels as its bits: infinities and NaN payloads round
// trip exactly (before the fix this test never ended: ctest's timeout failed it).
BOOST_FIXTURE_TEST_CASE(infinities_and_nans_round_trip_bit_for_bit, wire_fixture) {
  const double inf = std::numeric_limits<double>::infinity();
  double nan_payload;
  uint64_t bits = 0x7ff8000000abcdefull;
  std::memcpy(&nan_payload, &bits, sizeof bits);
  at::step_result r;
  r.loss = inf;
  r.metric_states = {{-inf, nan_payload}, {0.25, -0.0}};
  auto buf = save(r);
  at::step_result back;
  BOOST_REQUIRE(!load(buf, back));
  BOOST_TEST(same_bits(back.loss, inf));
  BOOST_REQUIRE(back.metric_states.size() == 2u);
  BOOST_TEST(same_bits(back.metric_states[0][0], -inf));
  BOOST_TEST(same_bits(back.metric_states[0][1], nan_payload));
  BOOST_TEST(same_bits(back.metric_states[1][1], -0.0));

  at::gate_decision d;
  d.hyperparams = {{"learning_rate", inf}, {"beta_1", 0.9}};
  at::gate_decision dback;
  BOOST_REQUIRE(!load(save(d), dback));
  BOOST_TEST(dback.hyperparams.size() == 2u);
  BOOST_TEST(dback.hyperparams[0].first == "learning_rate");
  BOOST_TEST(same_bits(dback.hyperparams[0].second, inf));

  at::status_report s;
  s.uptime = inf;
  s.recent = {{-inf, "a failure"}};
  at::status_report sback;
  BOOST_REQUIRE(!load(save(s), sback));
  BOOST_TEST(same_bits(sback.uptime, inf));
  BOOST_REQUIRE(sback.recent.size() == 1u);
  BOOST_TEST(sback.recent[0].second == "a failure");
  // A sequence announcing more elements than the message holds is refused at once.
  auto cut = save(r);
  cut.resize(cut.size() - 20);
  at::step_result broken;
  BOOST_TEST(static_cast<bool>(load(cut, broken)));
}
