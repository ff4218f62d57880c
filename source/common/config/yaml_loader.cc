#include "source/common/config/yaml_loader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

#include "api/sluice/config/v1/options.pb.h"
#include "source/common/config/duration.h"

namespace sluice {
namespace config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;

// Nesting is bounded by the schema except through Any, which can nest without end.
constexpr int kMaxDepth = 32;
// YAML aliases can make a small file expand into a huge tree; stop well before that hurts.
constexpr size_t kMaxNodes = 100000;
constexpr std::string_view kTypeUrlPrefix = "type.googleapis.com/";
constexpr size_t kMaxEchoedScalar = 48;

#define RETURN_IF_ERROR(expr)          \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (false)

std::string joinPath(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

// What was found instead of the expected value. Scalars are echoed only where the caller asks:
// a scalar where a list or map belongs may be a secret (`api_keys: <key>`).
std::string describe(const YAML::Node& node, bool echo_scalar = false) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar: {
      if (!echo_scalar) return "a scalar";
      const std::string& s = node.Scalar();
      if (s.size() > kMaxEchoedScalar) {
        return absl::StrFormat("\"%s...\"", absl::CHexEscape(s.substr(0, kMaxEchoedScalar)));
      }
      return absl::StrFormat("\"%s\"", absl::CHexEscape(s));
    }
    case YAML::NodeType::Null:
      return "nothing";
    default:
      return "an undefined node";
  }
}

const char* typeName(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return "an integer (int32)";
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer (int64)";
    case FieldDescriptor::CPPTYPE_UINT32:
      return "an unsigned integer (uint32)";
    case FieldDescriptor::CPPTYPE_UINT64:
      return "an unsigned integer (uint64)";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return "an enum name";
    case FieldDescriptor::CPPTYPE_STRING:
      return f->type() == FieldDescriptor::TYPE_BYTES ? "base64 text" : "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "a map";
  }
  return "a value";
}

bool isWrapper(Descriptor::WellKnownType t) {
  switch (t) {
    case Descriptor::WELLKNOWNTYPE_DOUBLEVALUE:
    case Descriptor::WELLKNOWNTYPE_FLOATVALUE:
    case Descriptor::WELLKNOWNTYPE_INT64VALUE:
    case Descriptor::WELLKNOWNTYPE_UINT64VALUE:
    case Descriptor::WELLKNOWNTYPE_INT32VALUE:
    case Descriptor::WELLKNOWNTYPE_UINT32VALUE:
    case Descriptor::WELLKNOWNTYPE_STRINGVALUE:
    case Descriptor::WELLKNOWNTYPE_BYTESVALUE:
    case Descriptor::WELLKNOWNTYPE_BOOLVALUE:
      return true;
    default:
      return false;
  }
}

// Types whose YAML form is a scalar, like their JSON form; inside an Any they sit under "value".
bool isScalarMessage(const Descriptor* d) {
  return d->well_known_type() == Descriptor::WELLKNOWNTYPE_DURATION ||
         isWrapper(d->well_known_type());
}

bool validUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

// Edits (insert, delete, substitute, swap two neighbours) turning a into b.
size_t editDistance(const std::string& a, const std::string& b) {
  const size_t w = b.size() + 1;
  std::vector<size_t> d((a.size() + 1) * w);
  for (size_t i = 0; i <= a.size(); ++i) d[i * w] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best =
          std::min({d[(i - 1) * w + j] + 1, d[i * w + j - 1] + 1, d[(i - 1) * w + j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        best = std::min(best, d[(i - 2) * w + j - 2] + 1);
      }
      d[i * w + j] = best;
    }
  }
  return d[a.size() * w + b.size()];
}

std::string normalizeKey(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '-') {
      out.push_back('_');
    } else if (c >= 'A' && c <= 'Z') {
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// "unknown field; did you mean X?" when a field name is close, else the list of known fields.
std::string unknownFieldMessage(const Descriptor* d, const std::string& key, bool any_payload) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  if (key.size() <= 64) {
    const std::string norm = normalizeKey(key);
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      size_t dist = editDistance(norm, f->name());
      // maxRequestHeadBytes (the JSON spelling) is a near miss too.
      if (normalizeKey(f->json_name()) == norm) dist = 0;
      if (dist < best_distance) {
        best_distance = dist;
        best = f->name();
      }
    }
    const size_t allowed = best.size() <= 5 ? 1 : (best.size() <= 10 ? 2 : 3);
    if (!best.empty() && best_distance <= allowed) {
      return absl::StrFormat("unknown field; did you mean %s?", best);
    }
  }
  std::string known;
  if (any_payload) known = "@type";
  for (int i = 0; i < d->field_count(); ++i) {
    if (!known.empty()) known += ", ";
    known += d->field(i)->name();
  }
  if (known.empty()) {
    return absl::StrFormat("unknown field (%s has no fields)", d->full_name());
  }
  return absl::StrFormat("unknown field (known fields: %s)", known);
}

// Optional sign and decimal digits; false on anything else or past 2^64-1.
bool parseDecimal(const std::string& s, bool& negative, uint64_t& magnitude) {
  size_t i = 0;
  negative = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    negative = s[i] == '-';
    ++i;
  }
  if (i == s.size()) return false;
  const char* begin = s.data() + i;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(begin, end, magnitude);
  if (ec != std::errc() || ptr != end) return false;
  return true;
}

class Walker {
 public:
  Walker(std::string_view source, const LoadOptions& options) : source_(source) {
    for (const auto& [type, field] : options.scalar_shorthands) {
      shorthands_[type] = field;
    }
  }

  absl::Status loadRoot(const YAML::Node& root, Message& msg) {
    if (root.IsNull()) return absl::OkStatus();  // An empty file: every field at its default.
    if (!root.IsMap()) {
      return fail(root, "", "expected a map at the top level, found " + describe(root));
    }
    return loadFields(root, "", msg, false, 0);
  }

  absl::Status fail(const YAML::Node& at, const std::string& path, const std::string& what) const {
    std::string out;
    if (!source_.empty()) out = source_ + ": ";
    if (!path.empty()) out += path + ": ";
    out += what;
    const YAML::Mark mark = at.Mark();
    if (!mark.is_null()) {
      out += absl::StrFormat(" (line %d, column %d)", mark.line + 1, mark.column + 1);
    }
    return absl::InvalidArgumentError(out);
  }

 private:
  absl::Status visit(const YAML::Node& at, const std::string& path) {
    if (++nodes_ > kMaxNodes) {
      return fail(at, path, "configuration too large (do YAML aliases expand too far?)");
    }
    return absl::OkStatus();
  }

  // Every key of the map `node` must be a field of msg (or "@type" in an Any payload).
  absl::Status loadFields(const YAML::Node& node, const std::string& path, Message& msg,
                          bool any_payload, int depth) {
    const Descriptor* d = msg.GetDescriptor();
    absl::flat_hash_set<std::string> seen;
    absl::flat_hash_map<const OneofDescriptor*, std::string> oneof_set;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      RETURN_IF_ERROR(visit(key, path));
      if (!key.IsScalar()) {
        return fail(key, path, "expected a field name as key, found " + describe(key));
      }
      const std::string& name = key.Scalar();
      const std::string child = joinPath(path, name);
      if (!seen.insert(name).second) {
        return fail(key, child, "duplicate key");
      }
      if (any_payload && name == "@type") continue;
      const FieldDescriptor* f = d->FindFieldByName(name);
      if (f == nullptr) {
        return fail(key, child, unknownFieldMessage(d, name, any_payload));
      }
      if (const OneofDescriptor* oneof = f->real_containing_oneof()) {
        auto [pos, inserted] = oneof_set.try_emplace(oneof, name);
        if (!inserted) {
          return fail(key, child,
                      absl::StrFormat("only one of the fields of %s may be set; %s is already",
                                      oneof->name(), pos->second));
        }
      }
      RETURN_IF_ERROR(loadField(value, child, msg, f, depth));
    }
    return absl::OkStatus();
  }

  absl::Status loadField(const YAML::Node& value, const std::string& path, Message& msg,
                         const FieldDescriptor* f, int depth) {
    RETURN_IF_ERROR(visit(value, path));
    // `key:` with nothing after it (or ~, null) leaves the field at its default.
    if (value.IsNull()) return absl::OkStatus();
    if (f->is_map()) return loadMapField(value, path, msg, f, depth);
    if (!f->is_repeated()) return loadValue(value, path, msg, f, depth);
    if (!value.IsSequence()) {
      return fail(value, path, "expected a list, found " + describe(value));
    }
    size_t index = 0;
    for (auto it = value.begin(); it != value.end(); ++it, ++index) {
      const YAML::Node item = *it;
      const std::string item_path = absl::StrFormat("%s[%d]", path, index);
      RETURN_IF_ERROR(visit(item, item_path));
      if (item.IsNull()) return fail(item, item_path, "empty list item");
      RETURN_IF_ERROR(loadValue(item, item_path, msg, f, depth));
    }
    return absl::OkStatus();
  }

  absl::Status loadMapField(const YAML::Node& value, const std::string& path, Message& msg,
                            const FieldDescriptor* f, int depth) {
    if (!value.IsMap()) return fail(value, path, "expected a map, found " + describe(value));
    const Descriptor* entry_type = f->message_type();
    const FieldDescriptor* key_field = entry_type->map_key();
    const FieldDescriptor* value_field = entry_type->map_value();
    absl::flat_hash_set<std::string> seen;
    for (auto it = value.begin(); it != value.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node item = it->second;
      RETURN_IF_ERROR(visit(key, path));
      if (!key.IsScalar()) {
        return fail(key, path, "expected a scalar map key, found " + describe(key));
      }
      const std::string item_path = absl::StrFormat("%s[%s]", path, key.Scalar());
      if (!seen.insert(key.Scalar()).second) return fail(key, item_path, "duplicate key");
      Message* entry = msg.GetReflection()->AddMessage(&msg, f);
      RETURN_IF_ERROR(loadValue(key, item_path, *entry, key_field, depth));
      RETURN_IF_ERROR(loadField(item, item_path, *entry, value_field, depth));
    }
    return absl::OkStatus();
  }

  // One value of field f: sets it (singular) or appends it (repeated).
  absl::Status loadValue(const YAML::Node& node, const std::string& path, Message& msg,
                         const FieldDescriptor* f, int depth) {
    const Reflection* r = msg.GetReflection();
    const bool rep = f->is_repeated();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth + 1 > kMaxDepth) return fail(node, path, "nested too deeply");
      Message* sub = rep ? r->AddMessage(&msg, f) : r->MutableMessage(&msg, f);
      return loadMessage(node, path, *sub, depth + 1);
    }
    if (!node.IsScalar()) {
      return fail(node, path,
                  absl::StrFormat("expected %s, found %s", typeName(f), describe(node)));
    }
    const std::string& text = node.Scalar();
    const bool echo = !f->options().GetExtension(sluice::config::v1::sensitive);
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        bool negative;
        uint64_t magnitude;
        if (!parseDecimal(text, negative, magnitude)) {
          return fail(node, path,
                      absl::StrFormat("expected %s, found %s", typeName(f), describe(node, echo)));
        }
        const bool is_unsigned = f->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                                 f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
        if (is_unsigned && negative && magnitude != 0) {
          return fail(node, path, absl::StrFormat("must not be negative, found %s", text));
        }
        uint64_t max;
        switch (f->cpp_type()) {
          case FieldDescriptor::CPPTYPE_INT32:
            max = negative ? uint64_t{1} << 31 : (uint64_t{1} << 31) - 1;
            break;
          case FieldDescriptor::CPPTYPE_INT64:
            max = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
            break;
          case FieldDescriptor::CPPTYPE_UINT32:
            max = std::numeric_limits<uint32_t>::max();
            break;
          default:
            max = std::numeric_limits<uint64_t>::max();
            break;
        }
        if (magnitude > max) {
          return fail(node, path,
                      absl::StrFormat("%s is out of range for %s", text, f->cpp_type_name()));
        }
        switch (f->cpp_type()) {
          case FieldDescriptor::CPPTYPE_INT32: {
            const auto v = static_cast<int32_t>(negative ? -static_cast<int64_t>(magnitude)
                                                         : static_cast<int64_t>(magnitude));
            rep ? r->AddInt32(&msg, f, v) : r->SetInt32(&msg, f, v);
            break;
          }
          case FieldDescriptor::CPPTYPE_INT64: {
            // Negating in unsigned arithmetic reaches INT64_MIN without overflow.
            const auto v = static_cast<int64_t>(negative ? ~magnitude + 1 : magnitude);
            rep ? r->AddInt64(&msg, f, v) : r->SetInt64(&msg, f, v);
            break;
          }
          case FieldDescriptor::CPPTYPE_UINT32: {
            const auto v = static_cast<uint32_t>(magnitude);
            rep ? r->AddUInt32(&msg, f, v) : r->SetUInt32(&msg, f, v);
            break;
          }
          default:
            rep ? r->AddUInt64(&msg, f, magnitude) : r->SetUInt64(&msg, f, magnitude);
            break;
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() ||
            !std::isfinite(v)) {
          return fail(node, path, "expected a number, found " + describe(node, echo));
        }
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
          if (std::fabs(v) > std::numeric_limits<float>::max()) {
            return fail(node, path, absl::StrFormat("%s is out of range for float", text));
          }
          rep ? r->AddFloat(&msg, f, static_cast<float>(v))
              : r->SetFloat(&msg, f, static_cast<float>(v));
        } else {
          rep ? r->AddDouble(&msg, f, v) : r->SetDouble(&msg, f, v);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        if (text != "true" && text != "false") {
          return fail(node, path, "expected true or false, found " + describe(node, echo));
        }
        rep ? r->AddBool(&msg, f, text == "true") : r->SetBool(&msg, f, text == "true");
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const google::protobuf::EnumValueDescriptor* v = f->enum_type()->FindValueByName(text);
        if (v == nullptr) {
          std::string names;
          for (int i = 0; i < f->enum_type()->value_count(); ++i) {
            if (!names.empty()) names += ", ";
            names += f->enum_type()->value(i)->name();
          }
          return fail(node, path,
                      absl::StrFormat("expected one of %s, found %s", names, describe(node, echo)));
        }
        rep ? r->AddEnum(&msg, f, v) : r->SetEnum(&msg, f, v);
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string value = text;
        if (f->type() == FieldDescriptor::TYPE_BYTES) {
          if (!absl::Base64Unescape(text, &value) && !absl::WebSafeBase64Unescape(text, &value)) {
            return fail(node, path, "expected base64 text");
          }
        } else if (!validUtf8(value)) {
          return fail(node, path, "not valid UTF-8");
        }
        rep ? r->AddString(&msg, f, std::move(value)) : r->SetString(&msg, f, std::move(value));
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
    return fail(node, path, "unsupported field type");
  }

  absl::Status loadMessage(const YAML::Node& node, const std::string& path, Message& msg,
                           int depth) {
    const Descriptor* d = msg.GetDescriptor();
    const Descriptor::WellKnownType wkt = d->well_known_type();
    if (wkt == Descriptor::WELLKNOWNTYPE_DURATION) return loadDuration(node, path, msg);
    if (wkt == Descriptor::WELLKNOWNTYPE_ANY) return loadAny(node, path, msg, depth);
    if (isWrapper(wkt)) return loadValue(node, path, msg, d->FindFieldByNumber(1), depth);
    if (wkt != Descriptor::WELLKNOWNTYPE_UNSPECIFIED) {
      return fail(node, path, absl::StrFormat("%s is not supported in configs", d->full_name()));
    }
    if (node.IsScalar()) {
      auto it = shorthands_.find(d->full_name());
      if (it != shorthands_.end()) {
        const FieldDescriptor* f = d->FindFieldByName(it->second);
        if (f != nullptr && !f->is_repeated()) return loadValue(node, path, msg, f, depth);
      }
    }
    if (!node.IsMap()) return fail(node, path, "expected a map, found " + describe(node));
    return loadFields(node, path, msg, false, depth);
  }

  absl::Status loadDuration(const YAML::Node& node, const std::string& path, Message& msg) {
    if (!node.IsScalar()) {
      return fail(
          node, path,
          "expected a duration such as 10s, 1.5s, 500ms, 2m or 1h, found " + describe(node));
    }
    google::protobuf::Duration d;
    absl::Status status = parseDuration(node.Scalar(), d);
    if (!status.ok()) return fail(node, path, std::string(status.message()));
    const Reflection* r = msg.GetReflection();
    r->SetInt64(&msg, msg.GetDescriptor()->FindFieldByNumber(1), d.seconds());
    r->SetInt32(&msg, msg.GetDescriptor()->FindFieldByNumber(2), d.nanos());
    return absl::OkStatus();
  }

  absl::Status loadAny(const YAML::Node& node, const std::string& path, Message& any, int depth) {
    if (!node.IsMap()) {
      return fail(node, path, "expected a map with an \"@type\" key, found " + describe(node));
    }
    YAML::Node type_node;
    bool found = false;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == "@type") {
        type_node = it->second;
        found = true;
        break;
      }
    }
    if (!found) {
      return fail(node, path,
                  "missing \"@type\" (e.g. \"@type\": "
                  "type.googleapis.com/sluice.filters.v1.RouterConfig)");
    }
    const std::string type_path = joinPath(path, "@type");
    if (!type_node.IsScalar()) {
      return fail(type_node, type_path, "expected a type URL, found " + describe(type_node));
    }
    const std::string& url = type_node.Scalar();
    if (url.size() <= kTypeUrlPrefix.size() ||
        url.compare(0, kTypeUrlPrefix.size(), kTypeUrlPrefix) != 0) {
      return fail(type_node, type_path,
                  absl::StrFormat("expected type.googleapis.com/<message name>, found %s",
                                  describe(type_node, true)));
    }
    const std::string type_name = url.substr(kTypeUrlPrefix.size());
    const Descriptor* type =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
    if (type == nullptr) {
      return fail(type_node, type_path,
                  absl::StrFormat("unknown type \"%s\" (no such message in this build)",
                                  absl::CHexEscape(type_name)));
    }
    const Message* prototype =
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(type);
    if (prototype == nullptr) return fail(type_node, type_path, "cannot instantiate " + type_name);
    std::unique_ptr<Message> payload(prototype->New());
    if (depth + 1 > kMaxDepth) return fail(node, path, "nested too deeply");
    if (isScalarMessage(type)) {
      // Like protobuf JSON: {"@type": ".../google.protobuf.Duration", "value": "1s"}.
      for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
        if (name == "@type") continue;
        if (name != "value") {
          return fail(it->first, joinPath(path, name),
                      "unknown field (known fields: @type, value)");
        }
        if (!it->second.IsNull()) {
          RETURN_IF_ERROR(loadMessage(it->second, joinPath(path, "value"), *payload, depth + 1));
        }
      }
    } else {
      RETURN_IF_ERROR(loadFields(node, path, *payload, true, depth + 1));
    }
    std::string bytes;
    {
      google::protobuf::io::StringOutputStream stream(&bytes);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      payload->SerializeToCodedStream(&coded);
    }
    const Reflection* r = any.GetReflection();
    r->SetString(&any, any.GetDescriptor()->FindFieldByNumber(1),
                 std::string(kTypeUrlPrefix) + type->full_name());
    r->SetString(&any, any.GetDescriptor()->FindFieldByNumber(2), std::move(bytes));
    return absl::OkStatus();
  }

  std::string source_;
  absl::flat_hash_map<std::string, std::string> shorthands_;
  size_t nodes_ = 0;
};

// Sees the documents of a stream go by without building them; remembers where the second starts.
struct DocumentCounter : public YAML::EventHandler {
  void OnDocumentStart(const YAML::Mark& mark) override {
    (++documents == 1 ? first : second) = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  int documents = 0;
  YAML::Mark first = YAML::Mark::null_mark();
  YAML::Mark second = YAML::Mark::null_mark();
};

// Parses exactly one YAML document; an empty text is a Null node.
absl::StatusOr<YAML::Node> parseDocument(std::string_view yaml_text, std::string_view source) {
  const std::string prefix = source.empty() ? "" : absl::StrFormat("%s: ", source);
  try {
    // Not YAML::LoadAll: in yaml-cpp 0.7 it loops forever, allocating, on some malformed streams
    // (a file starting with ",": jbeder/yaml-cpp#1040). Here at most two documents are read.
    const std::string text(yaml_text);
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentCounter counter;
    while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.documents == 0) return YAML::Node(YAML::NodeType::Null);
    if (counter.documents > 1) {
      const YAML::Mark& mark = counter.second;
      if (mark.pos == counter.first.pos) {
        // The parser made no progress: a token it cannot start a document with.
        return absl::InvalidArgumentError(
            absl::StrFormat("%sYAML syntax error at line %d, column %d: unexpected token", prefix,
                            mark.line + 1, mark.column + 1));
      }
      return absl::InvalidArgumentError(
          absl::StrFormat("%sonly one YAML document is allowed, found a second one (line %d)",
                          prefix, mark.is_null() ? 0 : mark.line + 1));
    }
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // `@type:` unquoted is the likeliest way to meet yaml-cpp's bare "unknown token".
    const bool at_sign = e.mark.pos >= 0 && static_cast<size_t>(e.mark.pos) < yaml_text.size() &&
                         yaml_text[e.mark.pos] == '@';
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sYAML syntax error at line %d, column %d: %s%s", prefix, e.mark.line + 1,
        e.mark.column + 1, e.msg, at_sign ? " (quote keys that start with @: \"@type\")" : ""));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%sYAML error: %s", prefix, e.what()));
  }
}

// --- toYaml -------------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += absl::StrFormat("\\x%02X", c);
        } else {
          out.push_back(ch);
        }
    }
  }
  out += "\"";
  return out;
}

std::string formatDouble(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, ptr) : "0";
}

class Emitter {
 public:
  // Lines of msg's fields as a block map, unindented.
  std::vector<std::string> messageLines(const Message& msg, bool any_payload_type = false) {
    std::vector<std::string> lines;
    const Reflection* r = msg.GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r->ListFields(msg, &fields);
    for (const FieldDescriptor* f : fields) {
      if (f->is_map()) {
        lines.push_back(f->name() + ":");
        for (int i = 0; i < r->FieldSize(msg, f); ++i) {
          const Message& entry = r->GetRepeatedMessage(msg, f, i);
          const Descriptor* et = entry.GetDescriptor();
          const std::string key = scalarText(entry, et->map_key(), -1);
          appendValue(lines, "  " + key + ":", entry, et->map_value(), -1, "    ");
        }
      } else if (f->is_repeated()) {
        lines.push_back(f->name() + ":");
        for (int i = 0; i < r->FieldSize(msg, f); ++i) {
          appendValue(lines, "  -", msg, f, i, "    ");
        }
      } else {
        appendValue(lines, f->name() + ":", msg, f, -1, "  ");
      }
    }
    return lines;
  }

  // The lines of a message written as a value (after "key:" or "-"); empty for {}.
  std::vector<std::string> valueLines(const Message& msg) {
    const Descriptor* d = msg.GetDescriptor();
    if (d->well_known_type() == Descriptor::WELLKNOWNTYPE_ANY) {
      const Reflection* r = msg.GetReflection();
      const std::string url = r->GetString(msg, d->FindFieldByNumber(1));
      const std::string bytes = r->GetString(msg, d->FindFieldByNumber(2));
      std::vector<std::string> lines;
      if (url.empty() && bytes.empty()) return lines;
      lines.push_back("\"@type\": " + quote(url));
      const Descriptor* type = nullptr;
      if (url.compare(0, kTypeUrlPrefix.size(), kTypeUrlPrefix) == 0) {
        type = google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
            url.substr(kTypeUrlPrefix.size()));
      }
      const Message* prototype =
          type ? google::protobuf::MessageFactory::generated_factory()->GetPrototype(type)
               : nullptr;
      std::unique_ptr<Message> payload(prototype ? prototype->New() : nullptr);
      if (payload == nullptr || !payload->ParseFromString(bytes)) {
        // Not in this build: keep the bytes so nothing is lost silently.
        lines.push_back("value: " + quote(absl::Base64Escape(bytes)));
        return lines;
      }
      if (isScalarMessage(type)) {
        lines.push_back("value: " + scalarMessageText(*payload));
        return lines;
      }
      for (std::string& line : messageLines(*payload)) lines.push_back(std::move(line));
      return lines;
    }
    return messageLines(msg);
  }

 private:
  // Writes one value of f after `head` ("key:" or "  -"); nested lines get `indent`.
  void appendValue(std::vector<std::string>& lines, const std::string& head, const Message& msg,
                   const FieldDescriptor* f, int index, const std::string& indent) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      lines.push_back(head + " " + scalarText(msg, f, index));
      return;
    }
    const Reflection* r = msg.GetReflection();
    const Message& sub = index < 0 ? r->GetMessage(msg, f) : r->GetRepeatedMessage(msg, f, index);
    if (isScalarMessage(sub.GetDescriptor())) {
      lines.push_back(head + " " + scalarMessageText(sub));
      return;
    }
    std::vector<std::string> sub_lines = valueLines(sub);
    if (sub_lines.empty()) {
      lines.push_back(head + " {}");
      return;
    }
    const bool list_item = head.back() == '-';
    if (list_item) {
      // "- first: x" then the rest aligned under "first".
      lines.push_back(head + " " + sub_lines[0]);
      for (size_t i = 1; i < sub_lines.size(); ++i) lines.push_back(indent + sub_lines[i]);
      return;
    }
    lines.push_back(head);
    for (std::string& line : sub_lines) lines.push_back(indent + line);
  }

  std::string scalarMessageText(const Message& msg) {
    const Descriptor* d = msg.GetDescriptor();
    const Reflection* r = msg.GetReflection();
    if (d->well_known_type() == Descriptor::WELLKNOWNTYPE_DURATION) {
      return formatDuration(r->GetInt64(msg, d->FindFieldByNumber(1)),
                            r->GetInt32(msg, d->FindFieldByNumber(2)));
    }
    return scalarText(msg, d->FindFieldByNumber(1), -1);
  }

  std::string scalarText(const Message& msg, const FieldDescriptor* f, int index) {
    const Reflection* r = msg.GetReflection();
    const bool rep = index >= 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return absl::StrFormat("%d",
                               rep ? r->GetRepeatedInt32(msg, f, index) : r->GetInt32(msg, f));
      case FieldDescriptor::CPPTYPE_INT64:
        return absl::StrFormat("%d",
                               rep ? r->GetRepeatedInt64(msg, f, index) : r->GetInt64(msg, f));
      case FieldDescriptor::CPPTYPE_UINT32:
        return absl::StrFormat("%d",
                               rep ? r->GetRepeatedUInt32(msg, f, index) : r->GetUInt32(msg, f));
      case FieldDescriptor::CPPTYPE_UINT64:
        return absl::StrFormat("%d",
                               rep ? r->GetRepeatedUInt64(msg, f, index) : r->GetUInt64(msg, f));
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return formatDouble(rep ? r->GetRepeatedDouble(msg, f, index) : r->GetDouble(msg, f));
      case FieldDescriptor::CPPTYPE_FLOAT:
        return formatDouble(rep ? r->GetRepeatedFloat(msg, f, index) : r->GetFloat(msg, f));
      case FieldDescriptor::CPPTYPE_BOOL:
        return (rep ? r->GetRepeatedBool(msg, f, index) : r->GetBool(msg, f)) ? "true" : "false";
      case FieldDescriptor::CPPTYPE_ENUM:
        return (rep ? r->GetRepeatedEnum(msg, f, index) : r->GetEnum(msg, f))->name();
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string s = rep ? r->GetRepeatedString(msg, f, index) : r->GetString(msg, f);
        return quote(f->type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(s) : s);
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
    return "~";
  }
};

}  // namespace

absl::Status loadYaml(std::string_view yaml_text, std::string_view source, Message& msg) {
  return loadYaml(yaml_text, source, msg, LoadOptions{});
}

absl::Status loadYaml(std::string_view yaml_text, std::string_view source, Message& msg,
                      const LoadOptions& options) {
  absl::StatusOr<YAML::Node> root = parseDocument(yaml_text, source);
  if (!root.ok()) return root.status();
  msg.Clear();
  Walker walker(source, options);
  try {
    return walker.loadRoot(*root, msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s%s", source.empty() ? "" : std::string(source) + ": ", e.what()));
  }
}

absl::StatusOr<std::vector<std::string>> yamlTopLevelKeys(std::string_view yaml_text,
                                                          std::string_view source) {
  absl::StatusOr<YAML::Node> root = parseDocument(yaml_text, source);
  if (!root.ok()) return root.status();
  std::vector<std::string> keys;
  if (root->IsNull()) return keys;
  Walker walker(source, LoadOptions{});
  if (!root->IsMap()) {
    return walker.fail(*root, "", "expected a map at the top level, found " + describe(*root));
  }
  try {
    for (auto it = root->begin(); it != root->end(); ++it) {
      if (it->first.IsScalar()) keys.push_back(it->first.Scalar());
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return keys;
}

std::string toYaml(const Message& msg) {
  Emitter emitter;
  std::vector<std::string> lines = emitter.valueLines(msg);
  if (lines.empty()) return "{}\n";
  std::string out;
  for (const std::string& line : lines) {
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace config
}  // namespace sluice
