// Decoding: ids to bytes, the added tokens' ids, and the valid UTF-8 a stream of tokens prints
// (StreamDecoder, utf8_sanitize).
#include <string>
#include <string_view>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "tokenizer/utf8.h"

namespace minigpt {

using tokenizer_detail::Utf8Status;

// --- decoding -----------------------------------------------------------------------------------

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab_ || !has_id_[id])
    throw Error(ErrorKind::Argument, "tokenizer: token id " + std::to_string(id) +
                                         " is not in the vocabulary (n_vocab " + std::to_string(n_vocab_) +
                                         ")");
  return std::string(id_bytes_[id]);
}

std::string Tokenizer::token_symbol(int32_t id) const {
  token_bytes(id);  // the range check
  return std::string(id_symbols_[id]);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= n_vocab_ || !has_id_[id])
      throw Error(ErrorKind::Argument, "tokenizer: id " + std::to_string(id) + " at position " +
                                           std::to_string(i) + " is not in the vocabulary (n_vocab " +
                                           std::to_string(n_vocab_) + ")");
    out += id_bytes_[id];
  }
  // The dummy prefix's space (tokenizers' Strip / Metaspace decoder, sentencepiece's DecodeIds).
  if (strip_prefix_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::optional<int32_t> Tokenizer::special_id(std::string_view text) const {
  for (const AddedToken& a : added_)
    if (a.content == text) return a.id;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  for (const AddedToken& a : added_)
    if (a.id == id && a.special) return true;
  return false;
}

// --- UTF-8 for display --------------------------------------------------------------------------

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Appends the decodable part of `bytes` to out with U+FFFD for invalid subparts; returns how many
// bytes were consumed. With final = false a trailing incomplete character is left unconsumed.
size_t sanitize_into(std::string_view bytes, std::string& out, bool final) {
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    size_t len = 0;
    Utf8Status st = tokenizer_detail::utf8_next(p + i, n - i, len);
    if (st == Utf8Status::Truncated && !final) break;
    if (st == Utf8Status::Valid) {
      out.append(bytes.substr(i, len));
    } else {
      out.append(kReplacement);
    }
    i += len;
  }
  return i;
}
}  // namespace

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  sanitize_into(bytes, out, true);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  if (strip_ && !pending_.empty()) {
    if (pending_[0] == ' ') pending_.erase(0, 1);
    strip_ = false;
  }
  std::string out;
  size_t used = sanitize_into(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace minigpt
