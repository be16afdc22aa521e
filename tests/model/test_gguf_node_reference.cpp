// flashkit's GGUF reader against an independent one: Hugging Face's JavaScript parser (@huggingface/gguf, pinned
// in tests/model/node, run by node). Every field both read must agree: version, counts, data offset, every
// metadata key with its value (all 13 GGUF value types, arrays element by element, 64-bit integers exactly),
// every tensor's name, dims, ggml type and offset. The files: the committed GGUF fixtures (written by
// tools/model/hf_to_gguf.py, so this also checks our writer against a third-party reader) and one built here with
// every value type, a non-default alignment and quantized tensors. Skipped without node or `npm ci` there.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf_builder.hpp"
#include "node_reference.hpp"
#include "model/gguf.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path node_dir() { return fs::path(FLASHKIT_TEST_DATA).parent_path() / "model" / "node"; }

// The reference parser's view of `file`, or nullopt with a reason in *why ("FAIL..." when node failed).
std::optional<json> reference(const fs::path& file, std::string* why) {
  return fk_test::run_node_json(node_dir(), "@huggingface/gguf",
                                "gguf_dump.mjs '" + fs::absolute(file).string() + "' > {out}", why);
}

// GGUF value types (gguf.md): 10 = u64, 11 = i64 arrive as decimal strings from the reference.
void expect_value_eq(const json& ours, const json& ref, int type, int sub_type, const std::string& where) {
  if (type == 9) {
    ASSERT_NE(sub_type, 9) << where << ": nested arrays are not compared (the reference reports no inner type)";
    ASSERT_TRUE(ours.is_array()) << where;
    ASSERT_EQ(ours.size(), ref.size()) << where;
    for (size_t i = 0; i < ref.size(); ++i)
      expect_value_eq(ours[i], ref[i], sub_type, -1, where + "[" + std::to_string(i) + "]");
  } else if (type == 10) {
    EXPECT_EQ(std::to_string(ours.get<uint64_t>()), ref.get<std::string>()) << where;
  } else if (type == 11) {
    EXPECT_EQ(std::to_string(ours.get<int64_t>()), ref.get<std::string>()) << where;
  } else if (type == 6) {  // f32: both hold the same float, widened to double
    EXPECT_EQ(float(ours.get<double>()), float(ref.get<double>())) << where;
  } else if (type == 12) {
    EXPECT_EQ(ours.get<double>(), ref.get<double>()) << where;
  } else if (type == 7) {
    EXPECT_EQ(ours.get<bool>(), ref.get<bool>()) << where;
  } else if (type == 8) {
    EXPECT_EQ(ours.get<std::string>(), ref.get<std::string>()) << where;
  } else {  // 8- to 32-bit integers
    EXPECT_EQ(ours.get<int64_t>(), ref.get<int64_t>()) << where;
  }
}

void compare_with_reference(const fs::path& file) {
  SCOPED_TRACE(file.string());
  std::string why;
  const std::optional<json> got = reference(file, &why);
  if (!got && why.starts_with("FAIL")) FAIL() << why;
  if (!got) GTEST_SKIP() << why;
  const json& ref = *got;
  const flashkit::model::GgufHeader h = flashkit::model::read_gguf_header(file);
  EXPECT_EQ(h.version, ref["version"].get<uint32_t>());
  EXPECT_EQ(std::to_string(h.data_offset), ref["tensor_data_offset"].get<std::string>());
  EXPECT_EQ(std::to_string(h.tensors.size()), ref["tensor_count"].get<std::string>());
  EXPECT_EQ(std::to_string(h.metadata.size()), ref["kv_count"].get<std::string>());
  for (const auto& [key, entry] : ref["metadata"].items()) {
    ASSERT_TRUE(h.metadata.contains(key)) << "flashkit lacks metadata key " << key;
    expect_value_eq(h.metadata[key], entry["value"], entry["type"].get<int>(), entry.value("sub_type", -1), key);
  }
  ASSERT_EQ(h.tensors.size(), ref["tensors"].size());
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& ours = h.tensors[i];
    const json& t = ref["tensors"][i];
    EXPECT_EQ(ours.name, t["name"].get<std::string>()) << i;
    EXPECT_EQ(ours.ggml_type, t["dtype"].get<uint32_t>()) << ours.name;
    EXPECT_EQ(std::to_string(ours.offset), t["offset"].get<std::string>()) << ours.name;
    ASSERT_EQ(ours.ne.size(), t["shape"].size()) << ours.name;
    for (size_t d = 0; d < ours.ne.size(); ++d)
      EXPECT_EQ(std::to_string(ours.ne[d]), t["shape"][d].get<std::string>()) << ours.name << " dim " << d;
  }
}

TEST(GgufNodeReference, CommittedFixtures) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(FLASHKIT_TEST_DATA) / "gguf")) {
    if (e.path().extension() != ".gguf") continue;
    compare_with_reference(e.path());
    if (HasFatalFailure() || IsSkipped()) return;
    ++n;
  }
  EXPECT_GE(n, 4);
}

template <typename T>
std::string bytes_of(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

TEST(GgufNodeReference, EveryValueTypeAlignmentAndQuantizedTensors) {
  fk_test::GgufBuilder b;
  b.alignment = 64;
  b.str("general.architecture", "llama").u32("general.alignment", 64);
  b.raw("t.u8", 0, bytes_of<uint8_t>(250)).raw("t.i8", 1, bytes_of<int8_t>(-7));
  b.raw("t.u16", 2, bytes_of<uint16_t>(65000)).raw("t.i16", 3, bytes_of<int16_t>(-30000));
  b.u32("t.u32", 4000000000u).raw("t.i32", 5, bytes_of<int32_t>(-2000000000));
  b.f32("t.f32", 0.1f).raw("t.bool", 7, bytes_of<uint8_t>(1)).str("t.str", "héllo \"gguf\"\n");
  b.raw("t.u64", 10, bytes_of<uint64_t>(18446744073709551557ull));  // above 2^63 and 2^53
  b.raw("t.i64", 11, bytes_of<int64_t>(-9007199254740993ll));       // not a double
  b.raw("t.f64", 12, bytes_of<double>(-1.0 / 3.0));
  {
    std::string a;
    fk_test::put_u32(a, 8);  // array of strings
    fk_test::put_u64(a, 3);
    for (const char* s : {"<s>", "", "▁the"}) fk_test::put_str(a, s);
    b.raw("t.arr_str", 9, a);
    std::string c;
    fk_test::put_u32(c, 5);  // array of i32
    fk_test::put_u64(c, 4);
    for (int32_t v : {1, -2, 3, -2147483647}) c += bytes_of(v);
    b.raw("t.arr_i32", 9, c);
    std::string d;
    fk_test::put_u32(d, 11);  // array of i64
    fk_test::put_u64(d, 2);
    d += bytes_of<int64_t>(-1) + bytes_of<int64_t>(int64_t(1) << 60);
    b.raw("t.arr_i64", 9, d);
    std::string e;
    fk_test::put_u32(e, 6);  // empty array of f32
    fk_test::put_u64(e, 0);
    b.raw("t.arr_empty", 9, e);
  }
  b.tensor("a.f32", {3, 5}, 0, std::string(3 * 5 * 4, '\x01'));
  b.tensor("b.f16", {7}, 1, std::string(7 * 2, '\x02'));
  b.tensor("c.q8_0", {64, 3}, 8, std::string(2 * 3 * 34, '\x03'));  // 34-byte blocks of 32 values
  b.tensor("d.bf16", {2, 2, 2}, 30, std::string(8 * 2, '\x04'));
  const std::string bytes = b.build();
  const fs::path file = fs::temp_directory_path() / ("flashkit_gguf_types_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream f(file, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  compare_with_reference(file);
  fs::remove(file);
}

}  // namespace
