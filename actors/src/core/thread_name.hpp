#pragma once
// Names the calling thread, so top -H, perf and gdb tell a detached actor's thread from
// the others ("at.worker1", "at.ps0"). Linux keeps 15 characters.

#include <pthread.h>

#include <string>

namespace actortrain::detail {

inline void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace actortrain::detail
