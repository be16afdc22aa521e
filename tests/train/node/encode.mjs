// Token ids of texts under Hugging Face's JavaScript tokenizers, for tests/train/test_bpe.cpp: the package is the
// one pinned in tests/tokenizer/node (its node_modules directory is passed in, since this script lives elsewhere).
//   node encode.mjs NODE_MODULES TOKENIZER_DIR TEXTS.json OUT.json
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, dir, textsFile, out] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(json, config);
const texts = JSON.parse(fs.readFileSync(textsFile, "utf8"));
const cases = texts.map((text) => ({
  ids: tok.encode(text, { add_special_tokens: false }).ids,
  ids_special: tok.encode(text, { add_special_tokens: true }).ids,
}));
for (const c of cases) c.decoded = c.ids.length ? tok.decode(c.ids, { clean_up_tokenization_spaces: false }) : "";
fs.writeFileSync(out, JSON.stringify({ cases }));
