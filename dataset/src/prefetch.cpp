// prefetch: a background thread per iterator runs the upstream and keeps up to
// buffer_size results (elements, the end, or an exception) in a FIFO queue.
//
//   producer thread                       consumer (next())
//   ---------------                       -----------------
//   wait while queue full and !stop       wait while queue empty
//   produce one result (no lock held)     pop front, wake producer
//   push result, wake consumer            element: return it
//   stop after the end or an exception    end: return nullopt; exception: rethrow
//
// The destructor sets stop, wakes the producer and joins it: the producer is either
// waiting (returns at once) or producing one element (returns when it is done).

#include "node.hpp"

#include <actortrain/model/fpu.hpp>

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace actortrain::dataset::detail {
namespace {

class prefetch_node final : public node {
 public:
  prefetch_node(node_ptr upstream, uint64_t buffer_size)
      : upstream_(std::move(upstream)), buffer_size_(buffer_size) {}

  node_kind kind() const override { return node_kind::prefetch; }
  cardinality_info cardinality() const override { return upstream_->cardinality(); }
  std::string label() const override { return fmt::format("prefetch({})", buffer_size_); }
  std::vector<node_ptr> inputs() const override { return {upstream_}; }
  node_ptr rebuild(std::vector<node_ptr> in) const override {
    return std::make_shared<prefetch_node>(std::move(in.at(0)), buffer_size_);
  }

 protected:
  std::unique_ptr<iterator> stream(uint64_t epoch, uint64_t start) const override {
    return std::make_unique<prefetch_iterator>(*upstream_, buffer_size_, epoch, start);
  }

 private:
  class prefetch_iterator final : public iterator {
   public:
    prefetch_iterator(const node& upstream, uint64_t capacity, uint64_t epoch, uint64_t start)
        : capacity_(capacity), position_(start) {
      thread_ = std::thread([this, &upstream, epoch, start] { run(upstream, epoch, start); });
    }

    ~prefetch_iterator() override {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        stop_ = true;
      }
      not_full_.notify_all();
      thread_.join();
    }

    std::optional<element> next() override {
      if (finished_) return std::nullopt;
      result r;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        not_empty_.wait(lock, [this] { return !queue_.empty(); });
        r = std::move(queue_.front());
        queue_.pop_front();
      }
      not_full_.notify_one();
      if (r.error) {
        finished_ = true;
        std::rethrow_exception(r.error);
      }
      if (!r.value) {
        finished_ = true;
        return std::nullopt;
      }
      ++position_;
      return std::move(r.value);
    }

    uint64_t position() const override { return position_; }

   private:
    /// One queue entry: an element, or the end (no value, no error), or an exception.
    struct result {
      std::optional<element> value;
      std::exception_ptr error;
    };

    void run(const node& upstream, uint64_t epoch, uint64_t start) {
      model::enable_flush_to_zero();
      try {
        auto it = upstream.iterate(epoch, start);
        while (true) {
          {
            std::unique_lock<std::mutex> lock(mutex_);
            not_full_.wait(lock, [this] { return stop_ || queue_.size() < capacity_; });
            if (stop_) return;
          }
          result r;
          r.value = it->next();
          const bool end = !r.value;
          push(std::move(r));
          if (end) return;
        }
      } catch (...) {
        result r;
        r.error = std::current_exception();
        push(std::move(r));
      }
    }

    void push(result r) {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        queue_.push_back(std::move(r));
      }
      not_empty_.notify_one();
    }

    const uint64_t capacity_;
    uint64_t position_;
    bool finished_ = false;  // consumer side only
    std::mutex mutex_;
    std::condition_variable not_empty_;
    std::condition_variable not_full_;
    std::deque<result> queue_;
    bool stop_ = false;
    std::thread thread_;  // last: started after every other member exists
  };

  node_ptr upstream_;
  uint64_t buffer_size_;
};

}  // namespace

node_ptr make_prefetch_node(node_ptr upstream, uint64_t buffer_size) {
  return std::make_shared<prefetch_node>(std::move(upstream), buffer_size);
}

}  // namespace actortrain::dataset::detail
