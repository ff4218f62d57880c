#include "source/common/config/redact.h"

#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"

#include "api/sluice/config/v1/options.pb.h"

namespace sluice {
namespace config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void redactAny(Message& any) {
  const Descriptor* d = any.GetDescriptor();
  const Reflection* r = any.GetReflection();
  const FieldDescriptor* url_field = d->FindFieldByNumber(1);
  const FieldDescriptor* value_field = d->FindFieldByNumber(2);
  const std::string url = r->GetString(any, url_field);
  const size_t slash = url.rfind('/');
  const Descriptor* type =
      slash == std::string::npos
          ? nullptr
          : google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                url.substr(slash + 1));
  const Message* prototype =
      type ? google::protobuf::MessageFactory::generated_factory()->GetPrototype(type) : nullptr;
  std::unique_ptr<Message> payload(prototype ? prototype->New() : nullptr);
  if (payload == nullptr || !payload->ParseFromString(r->GetString(any, value_field))) {
    r->ClearField(&any, value_field);
    return;
  }
  redact(*payload);
  r->SetString(&any, value_field, payload->SerializeAsString());
}

}  // namespace

void redact(Message& msg) {
  const Descriptor* d = msg.GetDescriptor();
  if (d->well_known_type() == Descriptor::WELLKNOWNTYPE_ANY) {
    redactAny(msg);
    return;
  }
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->options().GetExtension(sluice::config::v1::sensitive)) {
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
        r->ClearField(&msg, f);
      } else if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(msg, f); ++i) {
          r->SetRepeatedString(&msg, f, i, kRedacted);
        }
      } else {
        r->SetString(&msg, f, kRedacted);
      }
      continue;
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        redact(*r->MutableRepeatedMessage(&msg, f, i));
      }
    } else {
      redact(*r->MutableMessage(&msg, f));
    }
  }
}

}  // namespace config
}  // namespace sluice
