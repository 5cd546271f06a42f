#include "balance/pack_list.h"

#include <algorithm>

#include "core/error.h"

namespace omnibal::balance {

void PackList::push(const uint32_t* ids, size_t n, const SampleTable& table) {
  PackLoad l;
  for (size_t i = 0; i < n; ++i) {
    OMNIBAL_CHECK(ids[i] < table.size(), "PackList::push: sample id ", ids[i],
                  " >= ", table.size());
    const Load& s = table.load[ids[i]];
    l.add(s.tiles(), s.tokens());
  }
  push(ids, n, l);
}

void PackList::push(const uint32_t* ids, size_t n, const PackLoad& load) {
  members_.insert(members_.end(), ids, ids + n);
  offsets_.push_back(static_cast<uint32_t>(members_.size()));
  load_.push_back(load);
}

void PackList::append(const PackList& other, const std::vector<uint32_t>& id_map) {
  OMNIBAL_CHECK(other.layout_ == layout_, "PackList::append: layouts differ");
  reserve(size() + other.size(), samples() + other.samples());
  for (size_t p = 0; p < other.size(); ++p) {
    for (const uint32_t* it = other.begin(p); it != other.end(p); ++it) {
      OMNIBAL_CHECK(*it < id_map.size(), "PackList::append: id ", *it, " not in id_map");
      members_.push_back(id_map[*it]);
    }
    offsets_.push_back(static_cast<uint32_t>(members_.size()));
    load_.push_back(other.load_[p]);
  }
}

void PackList::append(const PackList& other) {
  OMNIBAL_CHECK(other.layout_ == layout_, "PackList::append: layouts differ");
  reserve(size() + other.size(), samples() + other.samples());
  for (size_t p = 0; p < other.size(); ++p)
    push(other.begin(p), other.end(p) - other.begin(p), other.load_[p]);
}

void PackList::reserve(size_t packs, size_t samples) {
  members_.reserve(samples);
  offsets_.reserve(packs + 1);
  load_.reserve(packs);
}

}  // namespace omnibal::balance
