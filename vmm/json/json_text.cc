#include "vmm/json/json_text.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace vmm {
namespace {

// Where the handler stopped, and why: read_json_text says it as "LINE:COLUMN: message".
struct TextError {
  size_t offset = 0;  // the byte the error points at (text.size(): after the last byte)
  std::string message;
};

using Json = nlohmann::json;

// Walks the text for nlohmann's iterator input adapter and notes, in *furthest, the byte after
// the last one the parser has taken. When the parser reports a key or a value, that is the end of
// its token (a number also took the byte after it, to see that it ended).
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, const char** furthest) : at_(at), furthest_(furthest) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    *furthest_ = ++at_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** furthest_;
};

enum class Token { kOpen, kString, kNumber, kTrue, kFalse, kNull };

bool number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 9:
// syntax error while parsing value - ..." or "[json.exception.out_of_range.406] number overflow
// ...": its position is replaced by ours, the reason kept.
std::string reason_of(const Json::exception& e) {
  std::string_view what = e.what();
  if (const size_t id_end = what.find("] "); id_end != std::string_view::npos)
    what.remove_prefix(id_end + 2);
  if (what.starts_with("parse error"))
    if (const size_t colon = what.find(": "); colon != std::string_view::npos)
      what.remove_prefix(colon + 2);
  return std::string(what);
}

// One SAX handler for both jobs: building the document (read_json_text), or finding where the
// key or element at `target` starts (locate_json_path: nothing is built).
class Handler : public nlohmann::json_sax<Json> {
 public:
  // While locating, `target` is asked at every key and array element, in text order, whether it
  // is the one sought: the path of the key or element, the length of its container's path (a
  // prefix of it), and the key (nullptr for an element).
  using Target =
      std::function<bool(std::string_view path, size_t container_length, const std::string* key)>;

  Handler(std::string_view text, const JsonLimits& limits, Target target)
      : text_(text), limits_(limits), target_(std::move(target)), furthest_(text.data()) {}

  // Runs nlohmann's parser over the whole text with this handler.
  void parse() {
    const char* begin = text_.data();
    Json::sax_parse(CountingIterator(begin, &furthest_),
                    CountingIterator(begin + text_.size(), &furthest_), this);
  }

  Json& root() { return root_; }
  const std::optional<TextError>& error() const { return error_; }
  std::optional<size_t> found() const { return found_; }
  const std::string& found_key() const { return found_key_; }

  bool null() override { return value(nullptr, Token::kNull); }
  bool boolean(bool v) override { return value(v, v ? Token::kTrue : Token::kFalse); }
  bool number_integer(number_integer_t v) override { return value(v, Token::kNumber); }
  bool number_unsigned(number_unsigned_t v) override { return value(v, Token::kNumber); }
  bool number_float(number_float_t v, const string_t&) override { return value(v, Token::kNumber); }
  bool string(string_t& v) override { return value(std::move(v), Token::kString); }
  bool binary(binary_t&) override { return false; }  // JSON text has no binary values

  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    path_.resize(f.path_length);  // appended in place: a long path is never copied per key
    if (f.path_length != 0) path_ += '.';
    path_ += k;
    if (target_) return !matches_target(Token::kString, &k);
    if (!limits_.duplicate_keys_allowed && f.container->contains(k))
      return fail(start_of(Token::kString),
                  "duplicate key " + path_ + " (JSON would silently keep only the last one)");
    f.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const Json::exception& e) override {
    // `position` counts the bytes read, the offending one included.
    error_ =
        TextError{std::min(position == 0 ? 0 : position - 1, text_.size()), "JSON " + reason_of(e)};
    return false;
  }

 private:
  struct Frame {
    Json* container;  // nullptr while locating
    bool array;
    size_t path_length;  // path_ of the container itself is path_.substr(0, path_length)
    size_t elements = 0;
    std::string key;  // the key whose value comes next
  };

  // Sets path_ to the path of the value that starts now: the key's (already set), an element's.
  void enter_value() {
    if (frames_.empty() || !frames_.back().array) return;
    Frame& f = frames_.back();
    path_.resize(f.path_length);
    path_ += '[';
    path_ += std::to_string(f.elements++);
    path_ += ']';
  }

  // While locating: whether the key or element whose token was just read is the target (then
  // found_ is set and the parse stops).
  bool matches_target(Token token, const std::string* key) {
    if (!target_(path_, frames_.back().path_length, key)) return false;
    found_ = start_of(token);
    found_key_ = key != nullptr ? *key : std::string();
    return true;
  }

  Json* place(Json v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.array) {
      f.container->push_back(std::move(v));
      return &f.container->back();
    }
    Json& slot = (*f.container)[f.key];
    slot = std::move(v);
    return &slot;
  }

  bool value(Json v, Token token) {
    enter_value();
    if (target_)
      return !(!frames_.empty() && frames_.back().array && matches_target(token, nullptr));
    place(std::move(v));
    return true;
  }

  bool open(Json container) {
    const bool array = container.is_array();
    enter_value();
    if (target_ && !frames_.empty() && frames_.back().array &&
        matches_target(Token::kOpen, nullptr))
      return false;
    if (frames_.size() >= limits_.max_depth)
      return fail(
          start_of(Token::kOpen),
          "JSON nests deeper than " + std::to_string(limits_.max_depth) + " objects and arrays");
    Json* placed = target_ ? nullptr : place(std::move(container));
    frames_.push_back(Frame{placed, array, path_.size(), 0, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  bool fail(size_t offset, std::string message) {
    error_ = TextError{offset, std::move(message)};
    return false;
  }

  // Where the token the parser has just read starts.
  size_t start_of(Token token) const {
    const size_t read = static_cast<size_t>(furthest_ - text_.data());
    switch (token) {
      case Token::kOpen: return read - 1;
      case Token::kTrue:
      case Token::kNull: return read - 4;
      case Token::kFalse: return read - 5;
      case Token::kString: return opening_quote(read - 1);
      case Token::kNumber: {
        size_t at = read;
        if (at > 0 && !number_char(text_[at - 1])) --at;  // the byte that ended the number
        while (at > 0 && number_char(text_[at - 1])) --at;
        return at;
      }
    }
    return 0;
  }

  // The quote that opens the string closed at `closing`: the nearest quote before it that no
  // odd run of backslashes escapes (the byte before an opening quote is never a backslash).
  size_t opening_quote(size_t closing) const {
    for (size_t at = closing; at-- > 0;) {
      if (text_[at] != '"') continue;
      size_t backslashes = 0;
      while (backslashes < at && text_[at - backslashes - 1] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return at;
    }
    return 0;
  }

  std::string_view text_;
  JsonLimits limits_;
  Target target_;  // empty: building the document
  const char* furthest_;
  Json root_;
  std::vector<Frame> frames_;
  std::string path_;
  std::optional<TextError> error_;
  std::optional<size_t> found_;
  std::string found_key_;
};

// Locating reads text that read_json_text accepted: no limit needs checking again.
constexpr JsonLimits kLocating{SIZE_MAX, SIZE_MAX, true};

std::string_view parent_path(std::string_view path) {
  const size_t cut = path.ends_with(']') ? path.rfind('[') : path.rfind('.');
  return cut == std::string_view::npos ? std::string_view() : path.substr(0, cut);
}

}  // namespace

Result<nlohmann::json> read_json_text(std::string_view text, const JsonLimits& limits) {
  auto refused = [&](size_t offset, const std::string& message) {
    return Error::usage(line_column(text, offset) + ": " + message);
  };
  if (text.size() > limits.max_bytes)
    return refused(limits.max_bytes, "the JSON text is " + std::to_string(text.size()) +
                                         " bytes, over the limit of " +
                                         std::to_string(limits.max_bytes));
  Handler handler(text, limits, nullptr);
  handler.parse();
  if (const std::optional<TextError>& e = handler.error()) return refused(e->offset, e->message);
  return std::move(handler.root());
}

std::string line_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t last_newline = before.rfind('\n');
  const size_t line_start = last_newline == std::string_view::npos ? 0 : last_newline + 1;
  return std::to_string(line) + ":" + std::to_string(offset - line_start + 1);
}

std::string json_child_path(std::string_view path, std::string_view key) {
  std::string s(path);
  if (!s.empty()) s += '.';
  s += key;
  return s;
}

std::string json_element_path(std::string_view path, size_t index) {
  return std::string(path) + "[" + std::to_string(index) + "]";
}

size_t locate_json_path(std::string_view text, std::string_view path) {
  for (std::string_view p = path; !p.empty(); p = parent_path(p)) {
    // Equal lengths first, then bytes from the end, where sibling paths differ.
    Handler handler(text, kLocating, [p](std::string_view at, size_t, const std::string*) {
      return at.size() == p.size() && std::equal(at.rbegin(), at.rend(), p.rbegin());
    });
    handler.parse();
    if (handler.found()) return *handler.found();
  }
  // The top-level value: its first byte, after a byte-order mark and white space.
  size_t at = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  while (at < text.size() &&
         (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r'))
    ++at;
  return at;
}

std::optional<std::string> first_json_key(std::string_view text, std::string_view object_path,
                                          const std::function<bool(const std::string&)>& accept) {
  Handler handler(text, kLocating,
                  [&](std::string_view at, size_t container_length, const std::string* key) {
                    return key != nullptr && container_length == object_path.size() &&
                           at.starts_with(object_path) && accept(*key);
                  });
  handler.parse();
  if (!handler.found()) return std::nullopt;
  return handler.found_key();
}

}  // namespace vmm
