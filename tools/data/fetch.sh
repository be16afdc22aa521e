#!/usr/bin/env bash
# Installs openly licensed English text from Debian packages and extracts it as plain UTF-8 text into
# data/corpus/ (gitignored). docs/training.md lists every source with its license and size.
#   tools/data/fetch.sh [OUT_DIR]        (default: data/corpus; needs root for apt-get, or the packages installed)
# Sources:
#   kjv.txt               bible-kjv-text + bible-kjv   King James Bible (public domain text)
#   debian-reference.txt  debian-reference-en          Debian Reference (GPL-2+), HTML -> text
#   doc-debian.txt        doc-debian                   Debian project documents (GPL / Open Publication License)
#   wordnet-glosses.txt   wordnet-base                 WordNet 3.0 definitions and examples (WordNet 3.0 license)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-data/corpus}
PKGS="bible-kjv-text bible-kjv debian-reference-en doc-debian wordnet-base"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "fetch.sh: install these Debian packages first (as root): apt-get install$missing" >&2
    exit 1
  fi
fi
PY=/usr/bin/python3
mkdir -p "$OUT"

# The whole Bible, one verse per line, with book/chapter headings.
bible -l0 "Gen1:1-Rev22:21" | sed 's/^ *[0-9]* //' > "$OUT/kjv.txt.tmp" && mv "$OUT/kjv.txt.tmp" "$OUT/kjv.txt"

# Debian Reference: the English HTML chapters, in order, as text (scripts, styles and navigation dropped).
$PY - "$OUT/debian-reference.txt" <<'PYEOF'
import glob, html.parser, re, sys
class Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.out = []; self.skip = 0
    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"): self.skip += 1
        if tag in ("p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "pre", "dt", "dd"): self.out.append("\n")
    def handle_endtag(self, tag):
        if tag in ("script", "style", "head") and self.skip: self.skip -= 1
    def handle_data(self, data):
        if not self.skip: self.out.append(data)
files = sorted(glob.glob("/usr/share/debian-reference/*.en.html"))
with open(sys.argv[1] + ".tmp", "w", encoding="utf-8") as f:
    for name in files:
        p = Text(); p.feed(open(name, encoding="utf-8").read())
        text = "\n".join(line.strip() for line in "".join(p.out).split("\n"))
        f.write(re.sub(r"\n{3,}", "\n\n", text).strip() + "\n\n")
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PYEOF

# doc-debian: the plain-text documents (some gzipped).
: > "$OUT/doc-debian.txt.tmp"
for f in $(ls /usr/share/doc/debian/*.txt /usr/share/doc/debian/*.txt.gz 2>/dev/null | sort); do
  case "$f" in *.gz) zcat "$f" ;; *) cat "$f" ;; esac >> "$OUT/doc-debian.txt.tmp"
  printf '\n\n' >> "$OUT/doc-debian.txt.tmp"
done
mv "$OUT/doc-debian.txt.tmp" "$OUT/doc-debian.txt"

# WordNet glosses: "lemma: definition; "example"" per synset.
$PY - "$OUT/wordnet-glosses.txt" <<'PYEOF'
import os, sys
out = []
for pos in ("noun", "verb", "adj", "adv"):
    for line in open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1"):
        if line.startswith("  ") or " | " not in line: continue  # license header
        head, gloss = line.rstrip("\n").split(" | ", 1)
        word = head.split()[4].replace("_", " ")
        word = word.split("(")[0]
        out.append(f"{word}: {gloss.strip()}\n")
with open(sys.argv[1] + ".tmp", "w", encoding="utf-8") as f:
    f.writelines(out)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PYEOF

for f in "$OUT"/*.txt; do printf '%-40s %10d bytes\n' "$f" "$(stat -c %s "$f")"; done
