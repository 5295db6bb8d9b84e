// Unicode services of the tokenizer that come from ICU: the NFC normalizer of tokenizer.json and the
// White_Space property that added tokens' lstrip / rstrip strip. ICU's headers stay inside normalizer.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace minigpt::tokenizer_detail {

// NFC exactly as Hugging Face `tokenizers` applies it. Its normalizer (the unicode-normalization-alignments
// crate) carries the tables of Unicode 9.0: characters assigned later are left as they are, and a mark
// assigned later neither reorders nor composes. ICU's NFC restricted to the code points of Unicode 9.0
// (a FilteredNormalizer2 over [:age=9.0:]) is the same function; tests/fixtures/tokenizer/neox/nfc.json
// checks it over all of Unicode.
//
// Returns false, leaving `out` alone, when `text` is already normalized (ASCII text is, and is not looked
// at twice); otherwise sets `out` to the NFC of `text` and returns true. `text` must be valid UTF-8.
bool nfc_normalize(std::string_view text, std::string& out);

// Loads ICU's normalization data now, so that a missing or broken ICU is an error of load(), not of
// encode(). Throws Error(Unsupported) naming what ICU said.
void nfc_check_available();

// Unicode's White_Space property: what `\s` is in the regex of tokenizers' lstrip / rstrip.
bool is_white_space(uint32_t cp);

}  // namespace minigpt::tokenizer_detail
