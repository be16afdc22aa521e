// A token tree for one verification step (SpecInfer): node 0 is the pending token (the last one produced, not yet
// in the target's cache); every other node is a proposed token whose parent precedes it. Flattened in insertion
// order (parent < child), which is the row order of Session::forward_tree.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace flashkit::spec {

struct TokenTree {
  std::vector<int32_t> token;                  // per node
  std::vector<int32_t> parent;                 // per node (-1 for the root)
  std::vector<std::vector<int32_t>> children;  // per node, in insertion order (= proposal priority)

  explicit TokenTree(int32_t root);
  int64_t size() const { return int64_t(token.size()); }
  int32_t add(int32_t parent_node, int32_t tok);  // a new child
  int32_t child(int32_t node, int32_t tok) const;   // the child holding tok, or -1
  // Inserts a continuation of the root as a path, sharing the prefix already present (a trie). Stops when the tree
  // holds max_nodes nodes. Returns the number of new nodes.
  int64_t insert(std::span<const int32_t> continuation, int64_t max_nodes);
  bool is_chain() const;  // every node has at most one child
  int64_t depth() const;  // of the deepest node (root: 0)
};

}  // namespace flashkit::spec
