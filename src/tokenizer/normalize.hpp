// Unicode normalization forms and lowercasing for the tokenizer's normalizers (ICU).
#pragma once
#include <string>
#include <string_view>

namespace flashkit::tok {
enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
std::string unicode_normalize(std::string_view utf8, UnicodeForm form);  // valid UTF-8 in and out
std::string unicode_lowercase(std::string_view utf8);
}  // namespace flashkit::tok
