#include <actortrain/model/dynamic_table.hpp>

#include <actortrain/model/random.hpp>

#include <stdexcept>

#include <algorithm>
#include <cstring>
#include <exception>
#include <iterator>
#include <system_error>
#include <thread>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

namespace actortrain::model {

struct dynamic_table::impl {
  // chunk_rows rows: their values, their slots (an optimizer block of its own, whose step
  // count is set to the table's before each apply), and per row its id and the apply
  // that last changed it (which also says what an incremental save takes).
  struct chunk {
    std::vector<float> values;
    slot_block s;
    std::vector<int64_t> ids, last_update;
  };

  dynamic_table_options o;
  std::vector<float> slot_init;
  std::vector<chunk> chunks;
  int64_t rows = 0;
  // The index from id to row: open addressing with linear probing over any number of
  // slots. An entry holds the id itself beside row + 1 (0: empty), so a lookup reads its
  // entry and then the row's values, never the row's id: in a large table each of those
  // is a cache miss and a page walk of its own. It is 1/2 to 3/4 full as it grows (it
  // grows by half) and rebuilt 3/5 full when an eviction leaves it under 9/20 full: at
  // 16 bytes an entry, 21 to 32 bytes a row while the table grows, where doubling would
  // cost up to 43. (Growing by a quarter held 21 to 27, but placed every row five times
  // over while a table grew, and made creating rows 1.5x slower.)
  struct entry {
    int64_t id = 0;
    uint64_t row1 = 0;
  };
  std::vector<entry> slots;
  size_t used = 0;
  // Ids not admitted yet: their reads, and the step of the last one.
  struct wait {
    uint64_t reads = 0;
    int64_t seen = 0;
  };
  std::unordered_map<int64_t, wait> waiting;
  // Ids dropped after apply `log_after` (-1: not logged), each with the apply that
  // dropped it: what an incremental save since then lists as removed.
  std::vector<std::pair<int64_t, int64_t>> removed;
  int64_t log_after = -1;
  int64_t iterations = 0;
  dynamic_table_counts counts;
  matrix scratch;  // one row, for the initializer

  impl() { reset_index(16); }

  size_t width() const { return static_cast<size_t>(o.dim); }
  int64_t id_of(int64_t r) const { return chunk_of(r).ids[local(r)]; }
  // Not mix64(id) alone: dynamic_owner hashes ids that way to pick their shard, so on a
  // shard of n every id's hash would share its low bits and use 1/n of the slots.
  static uint64_t hash(int64_t id) { return mix64(static_cast<uint64_t>(id) ^ 0x2545f4914f6cdd1dull); }
  // The hash scaled to [0, slots): its high bits, a multiply instead of a division.
  size_t home(int64_t id) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(hash(id)) * slots.size()) >> 64);
  }
  size_t next(size_t i) const { return i + 1 == slots.size() ? 0 : i + 1; }

  int64_t find(int64_t id) const {
    for (size_t i = home(id);; i = next(i)) {
      const entry& e = slots[i];
      if (e.row1 == 0) return -1;
      if (e.id == id) return static_cast<int64_t>(e.row1) - 1;
    }
  }
  void place(int64_t id, int64_t r) {
    size_t i = home(id);
    while (slots[i].row1 != 0) i = next(i);
    slots[i] = entry{id, static_cast<uint64_t>(r + 1)};
  }
  // An index of n slots holding every row. The old index goes first (at 100M rows it is
  // gigabytes: both at once would set the peak), and rows are placed from their chunks'
  // ids, read in order.
  // When the new index cannot be had, the old size is taken again (its memory was just
  // given back) and the error goes on: the table stays whole, every row in its index.
  void rebuild_index(size_t n) {
    const size_t before = slots.size();
    try {
      reset_index(n);
    } catch (const std::bad_alloc&) {
      reset_index(before);
      place_all();
      throw;
    }
    place_all();
  }
  // Every row into an empty index: each place is a cache miss in a large index, so the
  // entry of the row 16 ahead is fetched meanwhile and the misses overlap.
  void place_all() {
    constexpr int64_t ahead = 16;
    for (int64_t q = 0; q < rows; ++q) {
      if (q + ahead < rows) __builtin_prefetch(&slots[home(id_of(q + ahead))], 1);
      place(id_of(q), q);
    }
    used = static_cast<size_t>(rows);
  }
  void reset_index(size_t n) {
    std::vector<entry>().swap(slots);  // freed first: assign() would hold both at once
    slots.assign(n, entry{});
    used = 0;
  }
  // Row r (whose id is set, and which is the last row) enters the index.
  void index_insert(int64_t r) {
    if ((used + 1) * 4 > slots.size() * 3) {
      rebuild_index(slots.size() + (slots.size() + 1) / 2);  // r included
      return;
    }
    place(id_of(r), r);
    ++used;
  }
  // The slot that holds row r.
  size_t slot_of(int64_t r) const {
    size_t i = home(id_of(r));
    while (slots[i].row1 != static_cast<uint64_t>(r + 1)) i = next(i);
    return i;
  }
  // Row r leaves the index; the entries after it shift back, so no probe chain breaks.
  void index_erase(int64_t r) {
    size_t gap = slot_of(r);
    for (size_t j = next(gap); slots[j].row1 != 0; j = next(j)) {
      const size_t h = home(slots[j].id);
      // Entry j may fill the gap unless its home lies within (gap, j] (cyclically).
      const bool between = gap <= j ? (gap < h && h <= j) : (gap < h || h <= j);
      if (!between) {
        slots[gap] = slots[j];
        gap = j;
      }
    }
    slots[gap] = entry{};
    --used;
  }

  // Row r's chunk and its place there: a shift and a mask for a power-of-two chunk_rows
  // (the default; a lookup takes several, and a division costs tens of cycles).
  int shift = -1;
  int64_t chunk_index(int64_t r) const { return shift >= 0 ? r >> shift : r / o.chunk_rows; }
  chunk& chunk_of(int64_t r) { return chunks[static_cast<size_t>(chunk_index(r))]; }
  const chunk& chunk_of(int64_t r) const { return chunks[static_cast<size_t>(chunk_index(r))]; }
  size_t local(int64_t r) const {
    return static_cast<size_t>(shift >= 0 ? r & (o.chunk_rows - 1) : r % o.chunk_rows);
  }
  float* values_of(int64_t r) { return chunk_of(r).values.data() + local(r) * width(); }
  const float* values_of(int64_t r) const { return chunk_of(r).values.data() + local(r) * width(); }

  void initial_row(int64_t id, float* out) { initial_row(id, out, scratch); }
  void initial_row(int64_t id, float* out, matrix& one_row) const {
    one_row.resize(1, o.dim);
    o.init.fill(one_row, dynamic_table::row_seed(o.seed, id));
    std::memcpy(out, one_row.data(), width() * sizeof(float));
  }

  // The first row of the last chunk.
  int64_t first_row_of_last() const { return (static_cast<int64_t>(chunks.size()) - 1) * o.chunk_rows; }

  // Chunk c made to hold n rows, its rows kept.
  void grow(chunk& c, size_t n) {
    c.values.resize(n * width());
    c.s.slots.resize(slot_init.size());
    for (auto& s : c.s.slots) s.resize(n * width());
    c.ids.resize(n);
    c.last_update.resize(n);
  }

  // A new row for id at the end (the first chunk grown, or a new chunk, when the last is
  // full): its values and slots uninitialized unless `init`.
  int64_t append(int64_t id, bool init) {
    if (rows >= int64_t{0xfffffffe}) throw std::length_error("dynamic_table: more than 2^32 - 2 rows");
    // The first chunk starts at 64 rows and doubles up to chunk_rows (a small table pays
    // for its rows, not for a whole chunk); every later chunk is whole. Row r so stays in
    // chunk r / chunk_rows.
    const bool full = chunks.empty() || chunks.back().ids.size() == static_cast<size_t>(rows - first_row_of_last());
    if (full) {
      if (chunks.size() == 1 && chunks[0].ids.size() < static_cast<size_t>(o.chunk_rows)) {
        grow(chunks[0], std::min(static_cast<size_t>(o.chunk_rows), 2 * chunks[0].ids.size()));
      } else {
        chunks.emplace_back();
        grow(chunks.back(), chunks.size() == 1 ? std::min<size_t>(64, static_cast<size_t>(o.chunk_rows))
                                               : static_cast<size_t>(o.chunk_rows));
      }
    }
    const int64_t r = rows++;
    auto& c = chunk_of(r);
    const size_t at = local(r);
    c.ids[at] = id;
    c.last_update[at] = iterations;
    if (init) {
      initial_row(id, values_of(r));
      for (size_t k = 0; k < slot_init.size(); ++k)
        std::fill_n(c.s.slots[k].data() + at * width(), width(), slot_init[k]);
    }
    index_insert(r);
    return r;
  }

  // Drops row r: the last row moves into its place.
  void remove(int64_t r) {
    auto& c = chunk_of(r);
    const size_t at = local(r);
    const int64_t id = c.ids[at];
    const int64_t last = rows - 1;
    index_erase(r);
    if (r != last) {
      const size_t moved = slot_of(last);
      auto& lc = chunk_of(last);
      const size_t lat = local(last);
      std::memcpy(values_of(r), values_of(last), width() * sizeof(float));
      for (size_t k = 0; k < slot_init.size(); ++k)
        std::memcpy(c.s.slots[k].data() + at * width(), lc.s.slots[k].data() + lat * width(), width() * sizeof(float));
      c.ids[at] = lc.ids[lat];
      c.last_update[at] = lc.last_update[lat];
      slots[moved].row1 = static_cast<uint64_t>(r + 1);
    }
    --rows;
    if (log_after >= 0) removed.emplace_back(id, iterations);
    // A chunk left empty is given back.
    if (rows <= (static_cast<int64_t>(chunks.size()) - 1) * o.chunk_rows) chunks.pop_back();
  }

  void evict() {
    const auto idle = static_cast<int64_t>(o.evict_after);
    for (int64_t r = rows - 1; r >= 0; --r) {
      const auto& c = chunk_of(r);
      if (iterations - c.last_update[local(r)] >= idle) {
        remove(r);
        ++counts.evicted;
      }
    }
    // Ids still waiting for admission are forgotten after as long without a read.
    for (auto w = waiting.begin(); w != waiting.end();)
      w = iterations - w->second.seen >= idle ? waiting.erase(w) : std::next(w);
    if (waiting.bucket_count() > 64 && waiting.size() * 4 < waiting.bucket_count()) waiting.rehash(0);
    if (slots.size() > 16 && used * 20 < slots.size() * 9) rebuild_index(std::max<size_t>(16, used * 5 / 3 + 1));
  }

  snapshot copy(int64_t since) const;
  size_t read_range(const int64_t* ids, size_t n, float* out, matrix& one_row) const;
};

uint64_t dynamic_table::row_seed(uint64_t seed, int64_t id) {
  return mix64(seed ^ mix64(static_cast<uint64_t>(id) + 0x632be59bd9b4e019ull));
}

dynamic_table::dynamic_table(dynamic_table_options o, std::vector<float> slot_init) : p_(std::make_unique<impl>()) {
  if (o.dim <= 0) throw std::invalid_argument(fmt::format("dynamic_table: dim must be positive, got {}", o.dim));
  if (o.chunk_rows <= 0)
    throw std::invalid_argument(fmt::format("dynamic_table: chunk_rows must be positive, got {}", o.chunk_rows));
  if (!o.init.fill) throw std::invalid_argument("dynamic_table: the initializer is empty");
  p_->o = std::move(o);
  p_->slot_init = std::move(slot_init);
  if ((p_->o.chunk_rows & (p_->o.chunk_rows - 1)) == 0)
    while ((uint64_t{1} << (p_->shift + 1)) <= static_cast<uint64_t>(p_->o.chunk_rows)) ++p_->shift;
}

namespace {

std::vector<float> initial_slots(const optimizer& opt) {
  std::vector<float> out;
  for (const auto& s : opt.make_slots(1).slots) out.push_back(s.front());
  return out;
}

}  // namespace

dynamic_table::dynamic_table(dynamic_table_options o, const optimizer& opt)
    : dynamic_table(std::move(o), initial_slots(opt)) {}

dynamic_table::~dynamic_table() = default;
dynamic_table::dynamic_table(dynamic_table&&) noexcept = default;
dynamic_table& dynamic_table::operator=(dynamic_table&&) noexcept = default;

int64_t dynamic_table::dim() const { return p_->o.dim; }
size_t dynamic_table::num_slots() const { return p_->slot_init.size(); }

// Reads ids[0..n) into out; returns how many had no row (they read their initial
// values, made in `one_row`). Changes nothing, so parts of one read can run at once.
size_t dynamic_table::impl::read_range(const int64_t* ids, size_t n, float* out, matrix& one_row) const {
  const auto& t = *this;
  const size_t w = t.width();
  size_t missing = 0;
  // A lookup in a large table is two dependent cache misses (the index entry, which
  // holds the id, then the row's values). Ids go in groups: every entry of the group is
  // fetched, then every group's id is looked up (its probe mostly within the line
  // fetched) and its row's values fetched, then the rows are copied, so the misses of a
  // group overlap instead of following one another.
  constexpr size_t group = 64;
  int64_t row_at[group];
  for (size_t g0 = 0; g0 < n; g0 += group) {
    const size_t m = std::min(group, n - g0);
    for (size_t k = 0; k < m; ++k) __builtin_prefetch(&t.slots[t.home(ids[g0 + k])]);
    for (size_t k = 0; k < m; ++k) {
      const int64_t r = row_at[k] = t.find(ids[g0 + k]);
      if (r < 0) continue;
      // Both ends: a row need not start on a cache line.
      __builtin_prefetch(t.values_of(r));
      __builtin_prefetch(t.values_of(r) + w - 1);
    }
    for (size_t k = 0; k < m; ++k) {
      const size_t j = g0 + k;
      if (row_at[k] >= 0) {
        std::memcpy(out + j * w, t.values_of(row_at[k]), w * sizeof(float));
      } else {
        t.initial_row(ids[j], out + j * w, one_row);
        ++missing;
      }
    }
  }
  return missing;
}

void dynamic_table::read(const int64_t* ids, size_t n, float* out, bool training, unsigned threads) {
  auto& t = *p_;
  const size_t w = t.width();
  // Parts of at least min_part ids: a thread costs tens of microseconds to start, a part
  // of 32,768 ids milliseconds to read in a table larger than the caches.
  constexpr size_t min_part = 32768;
  const size_t parts = std::max<size_t>(1, std::min<size_t>(threads, n / min_part));
  size_t missing = 0;
  if (parts == 1) {
    missing = t.read_range(ids, n, out, t.scratch);
  } else {
    // The caller's thread reads the first part, a thread of its own each other part.
    std::vector<size_t> missed(parts, 0);
    std::vector<std::thread> helpers;
    const size_t each = (n + parts - 1) / parts;
    // What a part threw (an initializer's error, no memory for a row): rethrown once
    // every thread is joined, as the read on one thread would have thrown it.
    std::vector<std::exception_ptr> failed(parts);
    auto guarded = [&, each](size_t k, matrix& one_row) {
      const size_t b = k * each, e = std::min(n, b + each);
      try {
        missed[k] = t.read_range(ids + b, e - b, out + b * w, one_row);
      } catch (...) {
        failed[k] = std::current_exception();
      }
    };
    helpers.reserve(parts - 1);
    try {
      for (size_t k = 1; k < parts; ++k)
        helpers.emplace_back([&guarded, k] {
          matrix one_row;
          guarded(k, one_row);
        });
    } catch (const std::system_error&) {
      // No thread to be had: the caller reads what is left.
      for (size_t k = helpers.size() + 1; k < parts; ++k) guarded(k, t.scratch);
    }
    guarded(0, t.scratch);
    for (auto& h : helpers) h.join();
    for (auto& e : failed)
      if (e) std::rethrow_exception(e);
    for (auto m : missed) missing += m;
  }
  if (training) t.counts.unadmitted_reads += missing;
}

void dynamic_table::apply(const optimizer& opt, const int64_t* ids, size_t n, const float* grads, double lr_scale) {
  auto& t = *p_;
  const size_t w = t.width();
  {
    std::vector<int64_t> sorted(ids, ids + n);
    std::sort(sorted.begin(), sorted.end());
    if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
      throw std::invalid_argument(fmt::format("dynamic_table::apply: id {} is given twice", *d));
  }
  // The rows present, with the gradient each takes, sorted by row: each chunk's run is
  // applied at once, its gradients gathered into one buffer (no work per empty chunk).
  std::vector<std::pair<int64_t, size_t>> touched;
  touched.reserve(n);
  for (size_t j = 0; j < n; ++j) {
    int64_t r = t.find(ids[j]);
    if (r < 0) {
      // An id without a row: admitted at its admit_after-th step with a gradient, its
      // row created then, with its initial values, and this gradient applied.
      if (t.o.admit_after > 1) {
        auto& wt = t.waiting[ids[j]];
        wt.reads += 1;
        wt.seen = t.iterations;
        if (wt.reads < t.o.admit_after) {
          ++t.counts.dropped_gradients;
          continue;
        }
        t.waiting.erase(t.waiting.find(ids[j]));
      }
      r = t.append(ids[j], true);
      ++t.counts.created;
    }
    touched.emplace_back(r, j);
  }
  std::sort(touched.begin(), touched.end());
  std::vector<int64_t> local;
  std::vector<float> g;
  for (size_t a = 0; a < touched.size();) {
    const int64_t c = t.chunk_index(touched[a].first);
    local.clear();
    g.clear();
    size_t b = a;
    for (; b < touched.size() && t.chunk_index(touched[b].first) == c; ++b) {
      local.push_back(static_cast<int64_t>(t.local(touched[b].first)));
      const float* row = grads + touched[b].second * w;
      g.insert(g.end(), row, row + w);
    }
    auto& ch = t.chunks[static_cast<size_t>(c)];
    ch.s.iterations = t.iterations;
    opt.apply_rows(ch.values.data(), w, local.data(), local.size(), g.data(), ch.s, lr_scale);
    a = b;
  }
  ++t.iterations;
  for (const auto& [r, j] : touched) {
    auto& ch = t.chunk_of(r);
    ch.last_update[t.local(r)] = t.iterations;
  }
  if (t.o.evict_after > 0) {
    const auto every = std::max<int64_t>(1, static_cast<int64_t>(t.o.evict_after / 4));
    if (t.iterations % every == 0) t.evict();
  }
}

bool dynamic_table::find(int64_t id, float* out) const {
  const int64_t r = p_->find(id);
  if (r < 0) return false;
  if (out) std::memcpy(out, p_->values_of(r), p_->width() * sizeof(float));
  return true;
}

int64_t dynamic_table::iterations() const { return p_->iterations; }

dynamic_table_counts dynamic_table::counts() const {
  auto c = p_->counts;
  c.rows = static_cast<uint64_t>(p_->rows);
  c.waiting = p_->waiting.size();
  return c;
}

size_t dynamic_table::bytes() const {
  const auto& t = *p_;
  size_t b = t.slots.capacity() * sizeof(impl::entry) + t.removed.capacity() * sizeof(t.removed[0]);
  for (const auto& c : t.chunks) {
    b += c.values.capacity() * sizeof(float) + c.ids.capacity() * sizeof(int64_t) +
         c.last_update.capacity() * sizeof(int64_t);
    for (const auto& s : c.s.slots) b += s.capacity() * sizeof(float);
  }
  // An unordered_map node: the pair and a next pointer (and the allocator's header),
  // plus a bucket pointer.
  b += t.waiting.size() * (sizeof(std::pair<const int64_t, impl::wait>) + 2 * sizeof(void*)) +
       t.waiting.bucket_count() * sizeof(void*);
  return b;
}

size_t dynamic_table::payload_bytes() const {
  return static_cast<size_t>(p_->rows) * p_->width() * (1 + num_slots()) * sizeof(float);
}

dynamic_table::snapshot dynamic_table::save(int64_t since) const {
  const auto& t = *p_;
  if (since >= 0 && (t.log_after < 0 || since < t.log_after))
    throw std::logic_error(fmt::format("dynamic_table::save: the ids dropped after apply {} are not known (logged {})",
                                       since, t.log_after < 0 ? std::string("from no step") : fmt::format("after apply {}", t.log_after)));
  return t.copy(since);
}

void dynamic_table::log_removed_after(int64_t since) {
  auto& t = *p_;
  if (since < 0) {
    t.removed.clear();
    t.removed.shrink_to_fit();
    t.log_after = -1;
    return;
  }
  t.removed.erase(std::remove_if(t.removed.begin(), t.removed.end(), [&](const auto& r) { return r.second <= since; }),
                  t.removed.end());
  if (t.removed.capacity() > 1024 && t.removed.size() * 4 < t.removed.capacity()) t.removed.shrink_to_fit();
  t.log_after = since;
}

dynamic_table::snapshot dynamic_table::impl::copy(int64_t since) const {
  const auto& t = *this;
  const size_t w = t.width();
  const bool full = since < 0;
  snapshot s;
  s.full = full;
  s.dim = t.o.dim;
  s.iterations = t.iterations;
  s.slots.resize(t.slot_init.size());
  for (int64_t r = 0; r < t.rows; ++r) {
    const auto& c = t.chunk_of(r);
    const size_t at = t.local(r);
    if (!full && c.last_update[at] <= since) continue;
    s.ids.push_back(c.ids[at]);
    s.last_update.push_back(c.last_update[at]);
    s.values.insert(s.values.end(), t.values_of(r), t.values_of(r) + w);
    for (size_t k = 0; k < s.slots.size(); ++k)
      s.slots[k].insert(s.slots[k].end(), c.s.slots[k].data() + at * w, c.s.slots[k].data() + (at + 1) * w);
  }
  if (!full)
    for (const auto& [id, step] : t.removed)
      if (step > since) s.removed.push_back(id);
  for (const auto& [id, w] : t.waiting) s.waiting.push_back(waiting_id{id, w.reads, w.seen});
  std::sort(s.waiting.begin(), s.waiting.end());
  return s;
}

void dynamic_table::merge(const snapshot& s, const std::function<bool(int64_t)>& mine) {
  auto& t = *p_;
  const size_t w = t.width();
  const size_t n = s.ids.size();
  if (s.dim != t.o.dim)
    throw std::invalid_argument(fmt::format("dynamic_table::merge: rows of width {} into a table of width {}", s.dim, t.o.dim));
  if (s.slots.size() != t.slot_init.size())
    throw std::invalid_argument(fmt::format("dynamic_table::merge: {} slots into a table of {}", s.slots.size(),
                                            t.slot_init.size()));
  bool sizes = s.values.size() == n * w && s.last_update.size() == n;
  for (const auto& k : s.slots) sizes = sizes && k.size() == n * w;
  if (!sizes)
    throw std::invalid_argument(fmt::format("dynamic_table::merge: a snapshot of {} ids with {} values, {} steps",
                                            n, s.values.size(), s.last_update.size()));
  auto accepts = [&](int64_t id) { return !mine || mine(id); };
  // A restore into an empty table sizes its index once (growing by half at a time
  // would place every row about three times over, and page in every size between).
  if (t.rows == 0 && n > 0) {
    const size_t incoming = mine ? static_cast<size_t>(std::count_if(s.ids.begin(), s.ids.end(), accepts)) : n;
    if (incoming * 4 > t.slots.size() * 3) t.rebuild_index(incoming * 5 / 3 + 1);
  }
  for (auto id : s.removed) {
    if (!accepts(id)) continue;
    if (auto r = t.find(id); r >= 0) t.remove(r);
    t.waiting.erase(id);  // gone since: its reads before do not count
  }
  for (size_t j = 0; j < n; ++j) {
    const int64_t id = s.ids[j];
    if (!accepts(id)) continue;
    int64_t r = t.find(id);
    if (r < 0) r = t.append(id, false);
    auto& c = t.chunk_of(r);
    const size_t at = t.local(r);
    std::memcpy(t.values_of(r), s.values.data() + j * w, w * sizeof(float));
    for (size_t k = 0; k < s.slots.size(); ++k)
      std::memcpy(c.s.slots[k].data() + at * w, s.slots[k].data() + j * w, w * sizeof(float));
    c.last_update[at] = s.last_update[j];
    t.waiting.erase(id);
  }
  t.iterations = s.iterations;
  // Every snapshot lists all the ids waiting when it was taken.
  for (auto w = t.waiting.begin(); w != t.waiting.end();) w = accepts(w->first) ? t.waiting.erase(w) : std::next(w);
  for (const auto& w : s.waiting)
    if (accepts(w.id) && t.find(w.id) < 0) t.waiting[w.id] = impl::wait{w.count, w.last};
  // A restored table has no past to be incremental to: the next save that may be
  // is one after log_removed_after again.
  t.removed.clear();
  t.log_after = -1;
}

void dynamic_table::clear() {
  auto& t = *p_;
  t.chunks.clear();
  t.rows = 0;
  t.reset_index(16);
  t.waiting.clear();
  t.removed.clear();
  t.log_after = -1;
}

}  // namespace actortrain::model
