#include "llama_aliases.hpp"

#include <algorithm>

namespace flashkit::cli {

std::vector<std::string> rewrite_llama_aliases(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  bool conversation = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;  // what follows is positional text
    if (args[i] == "-ngl") args[i] = "--n-gpu-layers";
    if (args[i] == "-cnv") args[i] = "--conversation";
    if (args[i] == "--conversation") conversation = true;
  }
  // generate in conversation mode is flashkit's chat (its -p becomes the system prompt, as in llama.cpp).
  if (conversation && args.size() > 1 && args[1] == "generate") {
    args[1] = "chat";
    args.erase(std::find(args.begin() + 2, args.end(), "--conversation"));
  }
  return args;
}

}  // namespace flashkit::cli
