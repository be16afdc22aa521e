#include "spec/tree.hpp"

#include <algorithm>

namespace flashkit::spec {

TokenTree::TokenTree(int32_t root) : token{root}, parent{-1}, children(1) {}

int32_t TokenTree::add(int32_t parent_node, int32_t tok) {
  const int32_t id = int32_t(token.size());
  token.push_back(tok);
  parent.push_back(parent_node);
  children.emplace_back();
  children[size_t(parent_node)].push_back(id);
  return id;
}

int32_t TokenTree::child(int32_t node, int32_t tok) const {
  for (int32_t c : children[size_t(node)])
    if (token[size_t(c)] == tok) return c;
  return -1;
}

int64_t TokenTree::insert(std::span<const int32_t> continuation, int64_t max_nodes) {
  int64_t added = 0;
  int32_t node = 0;
  for (int32_t tok : continuation) {
    const int32_t c = child(node, tok);
    if (c >= 0) {
      node = c;
      continue;
    }
    if (size() >= max_nodes) break;
    node = add(node, tok);
    ++added;
  }
  return added;
}

bool TokenTree::is_chain() const {
  for (const auto& c : children)
    if (c.size() > 1) return false;
  return true;
}

int64_t TokenTree::depth() const {
  std::vector<int64_t> d(token.size(), 0);
  int64_t m = 0;
  for (size_t i = 1; i < token.size(); ++i) m = std::max(m, d[i] = d[size_t(parent[i])] + 1);
  return m;
}

}  // namespace flashkit::spec
