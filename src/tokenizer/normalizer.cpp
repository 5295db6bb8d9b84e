#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <climits>
#include <cstring>
#include <memory>

#include "minigpt/error.h"

namespace minigpt::tokenizer_detail {
namespace {

// ICU's NFC seen through the code points of Unicode 9.0, built once. Normalizer2 and a frozen UnicodeSet
// are immutable, so any number of threads may use them at once.
struct Nfc9 {
  std::unique_ptr<icu::UnicodeSet> unicode9;
  std::unique_ptr<icu::FilteredNormalizer2> nfc;
  std::string error;  // non-empty: ICU could not provide it

  Nfc9() {
    UErrorCode ec = U_ZERO_ERROR;
    const icu::Normalizer2* base = icu::Normalizer2::getNFCInstance(ec);
    if (U_FAILURE(ec)) {
      error = std::string("ICU has no NFC data: ") + u_errorName(ec);
      return;
    }
    // [:age=9.0:] is every code point assigned in Unicode 9.0 or before.
    unicode9 = std::make_unique<icu::UnicodeSet>(icu::UnicodeString("[:age=9.0:]", -1, US_INV), ec);
    if (U_FAILURE(ec)) {
      error = std::string("ICU cannot build the set of Unicode 9.0 code points: ") + u_errorName(ec);
      return;
    }
    unicode9->freeze();
    nfc = std::make_unique<icu::FilteredNormalizer2>(*base, *unicode9);
  }
};

const Nfc9& nfc9() {
  static const Nfc9 n;
  return n;
}

bool is_ascii(std::string_view s) {
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) return false;
  }
  for (; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) return false;
  return true;
}

}  // namespace

void nfc_check_available() {
  const Nfc9& n = nfc9();
  if (!n.error.empty()) throw Error(ErrorKind::Unsupported, "tokenizer: normalizer NFC: " + n.error);
}

bool nfc_normalize(std::string_view text, std::string& out) {
  if (is_ascii(text)) return false;  // every ASCII character is its own NFC and composes with nothing
  nfc_check_available();
  if (text.size() > size_t(INT32_MAX))  // ICU's StringPiece holds an int32_t length
    throw Error(ErrorKind::Argument, "tokenizer: a text of 2 GiB or more cannot be normalized");
  const icu::Normalizer2& nfc = *nfc9().nfc;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  UErrorCode ec = U_ZERO_ERROR;
  if (nfc.isNormalizedUTF8(piece, ec) && U_SUCCESS(ec)) return false;
  ec = U_ZERO_ERROR;
  std::string result;
  result.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&result);
  nfc.normalizeUTF8(0, piece, sink, nullptr, ec);
  if (U_FAILURE(ec))
    throw Error(ErrorKind::Unsupported, std::string("tokenizer: ICU's NFC failed: ") + u_errorName(ec));
  out = std::move(result);
  return true;
}

bool is_white_space(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

}  // namespace minigpt::tokenizer_detail
