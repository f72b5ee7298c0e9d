// tests/support/flat_json.hpp — a small strict parser for the flat JSON
// objects of gnmr's event log (one object per line, string, number and
// null values only), so the telemetry tests can read the log back without
// a JSON library. Strict on purpose: a malformed line, a duplicate key or
// trailing characters make ok false, and the test fails on it.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <string>

namespace flat_json {

struct JValue {
  enum Kind { kString, kNumber, kNull } kind = kNull;
  std::string text;  // string contents (unescaped) or the number's literal
};
using JObject = std::map<std::string, JValue>;

struct JParser {
  const std::string& s;
  std::size_t i = 0;
  bool ok = true;
  void fail() { ok = false; i = s.size(); }
  bool eat(char c) {
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  std::string str() {
    std::string out;
    if (!eat('"')) return fail(), out;
    while (i < s.size() && s[i] != '"') {
      const char c = s[i++];
      if (static_cast<unsigned char>(c) < 0x20) return fail(), out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) return fail(), out;
      const char e = s[i++];
      if (e == '"' || e == '\\' || e == '/') {
        out += e;
      } else if (e == 'n') {
        out += '\n';
      } else if (e == 'u' && i + 4 <= s.size()) {
        out += static_cast<char>(std::strtol(s.substr(i, 4).c_str(), nullptr, 16));
        i += 4;
      } else {
        return fail(), out;
      }
    }
    if (!eat('"')) fail();
    return out;
  }
  JValue value() {
    JValue v;
    if (i < s.size() && s[i] == '"') {
      v.kind = JValue::kString;
      v.text = str();
    } else if (s.compare(i, 4, "null") == 0) {
      i += 4;
    } else {
      // JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
      const std::size_t b = i;
      eat('-');
      if (eat('0')) {
      } else if (i < s.size() && s[i] >= '1' && s[i] <= '9') {
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      } else {
        fail();
      }
      if (eat('.')) {
        if (!(i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))) fail();
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      if (eat('e') || eat('E')) {
        if (!eat('+')) eat('-');
        if (!(i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))) fail();
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      v.kind = JValue::kNumber;
      v.text = s.substr(b, i - b);
    }
    return v;
  }
  JObject object() {
    JObject o;
    if (!eat('{')) return fail(), o;
    do {
      const std::string k = str();
      if (!eat(':')) return fail(), o;
      if (o.count(k)) return fail(), o;  // duplicate key
      o[k] = value();
    } while (ok && eat(','));
    if (!eat('}') || i != s.size()) fail();
    return o;
  }
};

}  // namespace flat_json
