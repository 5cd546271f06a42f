#include "data/chat_template.h"

#include "core/error.h"

namespace omnibal::data {

namespace {

void push(TokenizedSample& out, int32_t id, bool trained) {
  out.input_ids.push_back(id);
  out.labels.push_back(trained ? id : kIgnoreLabel);
}

std::string strip(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer, const std::string& name,
                           std::string system_message)
    : tokenizer_(tokenizer), name_(name), system_message_(std::move(system_message)) {
  OMNIBAL_CHECK(name == "internlm2-chat", "data.template: unknown chat template '", name,
                "'; expected one of: internlm2-chat");
}

std::vector<std::string> ChatTemplate::names() { return {"internlm2-chat"}; }

void ChatTemplate::append_text(const std::string& text, bool trained, TokenizedSample& out) const {
  if (text.empty()) return;
  for (int32_t id : tokenizer_.encode(text)) push(out, id, trained);
}

void ChatTemplate::append_value(const std::string& value, bool trained,
                                const std::vector<int>& tiles, int tokens_per_tile,
                                size_t& next_image, TokenizedSample& out) const {
  const SpecialTokens& sp = tokenizer_.special();
  const std::string placeholder = kImagePlaceholder;
  size_t pos = 0;
  for (size_t hit = value.find(placeholder); hit != std::string::npos;
       hit = value.find(placeholder, pos)) {
    append_text(value.substr(pos, hit - pos), trained, out);
    OMNIBAL_CHECK(next_image < tiles.size(), "chat template: more <image> placeholders than the ",
                  tiles.size(), " tile counts given");
    const int64_t n = static_cast<int64_t>(tiles[next_image++]) * tokens_per_tile;
    push(out, sp.img_start, false);
    for (int64_t i = 0; i < n; ++i) push(out, sp.img_context, false);
    push(out, sp.img_end, false);
    pos = hit + placeholder.size();
  }
  append_text(value.substr(pos), trained, out);
}

TokenizedSample ChatTemplate::render(const SampleRecord& record, const std::vector<int>& tiles,
                                     int tokens_per_tile) const {
  OMNIBAL_CHECK(tiles.size() == record.images.size(), "chat template: ", tiles.size(),
                " tile counts for ", record.images.size(), " images");
  const SpecialTokens& sp = tokenizer_.special();
  TokenizedSample out;
  if (sp.bos >= 0) push(out, sp.bos, false);
  if (!system_message_.empty()) {
    push(out, sp.im_start, false);
    append_text("system\n" + system_message_, false, out);
    push(out, sp.im_end, false);
  }
  int placeholders = 0;
  for (const auto& t : record.turns) placeholders += count_image_placeholders(t.value);
  const bool prepend = record.images.size() == 1 && placeholders == 0;
  size_t next_image = 0;
  for (size_t i = 0; i < record.turns.size(); ++i) {
    const Turn& turn = record.turns[i];
    std::string value = strip(turn.value);
    if (i == 0 && prepend) value = std::string(kImagePlaceholder) + "\n" + value;
    const bool reply = turn.role == Role::kGpt;
    push(out, sp.im_start, false);
    append_text(reply ? "assistant\n" : "user\n", false, out);
    append_value(value, reply, tiles, tokens_per_tile, next_image, out);
    push(out, sp.im_end, reply);
  }
  OMNIBAL_CHECK(next_image == tiles.size(), "chat template: ", tiles.size(), " images but ",
                next_image, " <image> placeholders in ", record.origin.to_string());
  return out;
}

}  // namespace omnibal::data
