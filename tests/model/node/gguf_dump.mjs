// Prints what Hugging Face's JavaScript GGUF parser (@huggingface/gguf) reads from a GGUF file, as JSON, for
// flashkit's GGUF reader test (tests/model/test_gguf_node_reference.cpp) to compare field by field:
//   node gguf_dump.mjs FILE.gguf
// {"version", "tensor_data_offset", "metadata": {key: {"type": GGUF value type, "value": ...}},
//  "tensors": [{"name", "shape" (innermost first), "dtype" (ggml type), "offset" (from the data start)}]}
// 64-bit integers are printed as decimal strings (JSON numbers lose precision above 2^53).
import { gguf } from "@huggingface/gguf";
import path from "node:path";

const file = process.argv[2];
if (!file) {
  console.error("usage: node gguf_dump.mjs FILE.gguf");
  process.exit(2);
}
const plain = (v) =>
  typeof v === "bigint" ? v.toString() : Array.isArray(v) ? v.map(plain) : v;

const { metadata, typedMetadata, tensorInfos, tensorDataOffset } = await gguf(path.resolve(file), {
  allowLocalFile: true,
  typedMetadata: true,
});
const meta = {};
for (const [key, entry] of Object.entries(typedMetadata)) {
  if (key === "version" || key === "tensor_count" || key === "kv_count") continue;  // header fields
  meta[key] = { type: entry.type, value: plain(entry.value), ...(entry.subType !== undefined ? { sub_type: entry.subType } : {}) };
}
const out = {
  version: Number(metadata.version),
  tensor_count: plain(metadata.tensor_count),
  kv_count: plain(metadata.kv_count),
  tensor_data_offset: plain(tensorDataOffset),
  metadata: meta,
  tensors: tensorInfos.map((t) => ({ name: t.name, shape: t.shape.map(plain), dtype: t.dtype, offset: plain(t.offset) })),
};
process.stdout.write(JSON.stringify(out));
