#include "tokenizer/normalize.hpp"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "flashkit/error.hpp"

namespace flashkit::tok {

namespace {
std::u16string to16(std::string_view s) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t n = 0;
  u_strFromUTF8(nullptr, 0, &n, s.data(), static_cast<int32_t>(s.size()), &st);
  std::u16string out(static_cast<size_t>(n), u'\0');
  st = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), n, nullptr, s.data(), static_cast<int32_t>(s.size()), &st);
  if (U_FAILURE(st)) fail(Status::invalid_argument, std::string("UTF-8 conversion failed: ") + u_errorName(st));
  return out;
}
std::string to8(const std::u16string& s) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t n = 0;
  u_strToUTF8(nullptr, 0, &n, reinterpret_cast<const UChar*>(s.data()), static_cast<int32_t>(s.size()), &st);
  std::string out(static_cast<size_t>(n), '\0');
  st = U_ZERO_ERROR;
  u_strToUTF8(out.data(), n, nullptr, reinterpret_cast<const UChar*>(s.data()), static_cast<int32_t>(s.size()), &st);
  if (U_FAILURE(st)) fail(Status::internal, std::string("UTF-16 conversion failed: ") + u_errorName(st));
  return out;
}
bool all_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}
}  // namespace

std::string unicode_normalize(std::string_view utf8, UnicodeForm form) {
  if (all_ascii(utf8)) return std::string(utf8);  // ASCII is invariant under all four forms
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* n = form == UnicodeForm::nfc    ? unorm2_getNFCInstance(&st)
                          : form == UnicodeForm::nfd  ? unorm2_getNFDInstance(&st)
                          : form == UnicodeForm::nfkc ? unorm2_getNFKCInstance(&st)
                                                      : unorm2_getNFKDInstance(&st);
  if (U_FAILURE(st)) fail(Status::internal, std::string("ICU normalizer unavailable: ") + u_errorName(st));
  std::u16string src = to16(utf8);
  std::u16string dst(src.size() * 3 + 16, u'\0');
  st = U_ZERO_ERROR;
  int32_t len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                                 reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    dst.assign(static_cast<size_t>(len), u'\0');
    st = U_ZERO_ERROR;
    len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                           reinterpret_cast<UChar*>(dst.data()), len, &st);
  }
  if (U_FAILURE(st)) fail(Status::internal, std::string("ICU normalization failed: ") + u_errorName(st));
  dst.resize(static_cast<size_t>(len));
  return to8(dst);
}

std::string unicode_lowercase(std::string_view utf8) {
  if (all_ascii(utf8)) {
    std::string out(utf8);
    for (auto& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  }
  std::u16string src = to16(utf8);
  std::u16string dst(src.size() * 2 + 16, u'\0');
  UErrorCode st = U_ZERO_ERROR;
  int32_t len = u_strToLower(reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()),
                             reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), "", &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    dst.assign(static_cast<size_t>(len), u'\0');
    st = U_ZERO_ERROR;
    len = u_strToLower(reinterpret_cast<UChar*>(dst.data()), len, reinterpret_cast<const UChar*>(src.data()),
                       static_cast<int32_t>(src.size()), "", &st);
  }
  if (U_FAILURE(st)) fail(Status::internal, std::string("ICU lowercase failed: ") + u_errorName(st));
  dst.resize(static_cast<size_t>(len));
  return to8(dst);
}

}  // namespace flashkit::tok
