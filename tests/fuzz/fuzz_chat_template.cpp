// libFuzzer target: chat templates as a model file carries them (src/chat/chat_template.h:
// tokenizer_config.json, chat_template.jinja, GGUF tokenizer.chat_template), parsed and rendered over a short
// conversation. The input is the template's source. Every input either renders or is an Error (Format when it
// does not parse, Argument when it cannot render); never a crash. A template is a program: one that loops a
// billion times or builds a gigabyte string is the model file's choice, as in transformers; the campaign
// reports those as timeouts or out-of-memory, which scripts/fuzz.sh sorts out.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat/chat_template.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi {{ x }}"},)"
      R"({"role":"assistant","content":"Hello."},{"role":"user","content":"\u00dcnic\u00f6de \ud83d\ude00"}])");
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    minigpt::ChatTemplate t(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, "fuzz");
    try {
      (void)t.render(messages, true);
    } catch (const minigpt::Error& e) {
      if (e.kind() != minigpt::ErrorKind::Argument) std::abort();
    }
  } catch (const minigpt::Error& e) {
    if (e.kind() != minigpt::ErrorKind::Format) std::abort();
  }
  return 0;
}
