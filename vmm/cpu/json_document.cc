#include "vmm/cpu/json_document.h"

#include <set>
#include <string>
#include <vector>

#include "vmm/cpu/json_syntax_error.h"
#include "vmm/cpu/json_tokens.h"

namespace vmm {
namespace {

using Json = nlohmann::json;

// The SAX handler json::sax_parse calls. Every event that begins a value (and every key) takes
// the next value-starting token from the lexer's token list: the parser consumes exactly those
// tokens in exactly that order, so the k-th such event belongs to the k-th such token.
class PositionRecorder {
 public:
  PositionRecorder(std::string_view text, const JsonTokens& tokens, JsonDocument& doc)
      : text_(text), tokens_(tokens), lines_(text), doc_(doc), dom_(doc.root, false) {}

  bool null() { return begin_scalar() && dom_.null(); }
  bool boolean(bool v) { return begin_scalar() && dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return begin_scalar() && dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) {
    return begin_scalar() && dom_.number_unsigned(v);
  }
  bool number_float(Json::number_float_t v, const Json::string_t& s) {
    return begin_scalar() && dom_.number_float(v, s);
  }
  bool string(Json::string_t& v) { return begin_scalar() && dom_.string(v); }
  bool binary(Json::binary_t& v) { return dom_.binary(v); }  // never from JSON text

  bool start_object(std::size_t n) { return begin_container(true) && dom_.start_object(n); }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return begin_container(false) && dom_.start_array(n); }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }

  bool key(Json::string_t& k) {
    const JsonToken& token = take_value_token();
    Frame& object = frames_.back();
    key_tracked_ = object.tracked &&
                   object.path.size() + 1 + k.size() <= kMaxPositionPath;
    key_path_.clear();
    if (key_tracked_) key_path_ = object.path.empty() ? k : object.path + "." + k;
    if (!object.keys.insert(k).second) {
      if (!duplicate_)
        duplicate_ = JsonTextError{lines_.at(token.begin),
                                   "duplicate key " + (key_tracked_ ? key_path_ : k) +
                                       " (JSON would silently keep only the last one)"};
    } else if (key_tracked_) {
      doc_.positions.record(key_path_, lines_.at(token.begin));
    }
    return dom_.key(k);
  }

  // `position` is the lexer's chars_read_total where it stopped. For a well-formed token in the
  // wrong place that is the token's end, which identifies it in the token list; otherwise the
  // lexer stopped inside a token it could not read, which lex_json() met at the same byte.
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& /*nlohmann's English text: not used*/) {
    JsonSyntaxError e{position == 0 ? 0 : position - 1, "JSON syntax error"};
    const auto& tokens = tokens_.tokens;
    size_t index = 0;
    while (index < tokens.size() && tokens[index].end != position) ++index;
    if (index < tokens.size()) {
      const JsonContainer container = frames_.empty()            ? JsonContainer::kNone
                                      : frames_.back().is_object ? JsonContainer::kObject
                                                                 : JsonContainer::kArray;
      e = unexpected_token(text_, tokens_, index, container);
    } else if (tokens_.error) {
      e = lex_error(text_, tokens_);
    }
    syntax_error_ = JsonTextError{lines_.at(e.offset), e.message};
    return false;
  }

  // The first problem in text order: a syntax (or depth) error ends parsing, so a duplicate key
  // seen at all came before it.
  std::optional<JsonTextError> first_error() const {
    return duplicate_ ? duplicate_ : syntax_error_;
  }

 private:
  struct Frame {
    std::string path;
    bool is_object = false;
    size_t next_index = 0;       // arrays: index of the next element
    std::set<std::string> keys;  // objects: keys seen so far
    bool tracked = true;         // `path` is recorded; false past kMaxPositionPath (path empty)
  };

  const JsonToken& take_value_token() {
    const std::vector<JsonToken>& tokens = tokens_.tokens;
    while (next_token_ < tokens.size() && !starts_value(tokens[next_token_].kind)) ++next_token_;
    if (next_token_ < tokens.size()) return tokens[next_token_++];
    static const JsonToken kNone{};  // not reached: the parser reads no token lex_json() did not
    return kNone;
  }

  // Takes the value's token and returns its path (nullopt: longer than kMaxPositionPath, not
  // recorded); array elements and the top-level value are recorded here, object members were
  // recorded at their key.
  std::optional<std::string> begin_value(const JsonToken& token) {
    if (frames_.empty()) {
      doc_.positions.record("", lines_.at(token.begin));
      return "";
    }
    Frame& parent = frames_.back();
    if (parent.is_object) return key_tracked_ ? std::optional(key_path_) : std::nullopt;
    const std::string index = "[" + std::to_string(parent.next_index++) + "]";
    if (!parent.tracked || parent.path.size() + index.size() > kMaxPositionPath)
      return std::nullopt;
    std::string path = parent.path + index;
    doc_.positions.record(path, lines_.at(token.begin));
    return path;
  }

  bool begin_scalar() {
    begin_value(take_value_token());
    return true;
  }

  bool begin_container(bool is_object) {
    const JsonToken& token = take_value_token();
    if (frames_.size() >= kMaxJsonDepth) {
      syntax_error_ = JsonTextError{lines_.at(token.begin), "JSON nests deeper than " +
                                                                std::to_string(kMaxJsonDepth) +
                                                                " objects and arrays"};
      return false;  // stops the parser; it does not call parse_error for this
    }
    std::optional<std::string> path = begin_value(token);
    frames_.push_back(Frame{path.value_or(""), is_object, 0, {}, path.has_value()});
    return true;
  }

  std::string_view text_;
  const JsonTokens& tokens_;
  LineIndex lines_;
  JsonDocument& doc_;
  nlohmann::detail::json_sax_dom_parser<Json> dom_;  // nlohmann's own DOM builder
  std::vector<Frame> frames_;
  size_t next_token_ = 0;
  std::string key_path_;  // path of the key just read: the path of the value that follows
  bool key_tracked_ = true;  // ... recorded (not longer than kMaxPositionPath)
  std::optional<JsonTextError> syntax_error_;
  std::optional<JsonTextError> duplicate_;
};

}  // namespace

JsonDocument read_json_document(std::string_view text) {
  JsonDocument doc;
  const JsonTokens tokens = lex_json(text);
  PositionRecorder recorder(text, tokens, doc);
  const bool parsed = Json::sax_parse(text.begin(), text.end(), &recorder);
  doc.error = recorder.first_error();
  if (!parsed && !doc.error) doc.error = JsonTextError{{}, "JSON syntax error"};  // not expected
  if (doc.error) doc.root = Json();
  return doc;
}

}  // namespace vmm
