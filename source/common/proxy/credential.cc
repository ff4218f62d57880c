#include "source/common/proxy/credential.h"

namespace sluice {
namespace proxy {

bool presentedKey(const ProxyRequest& request, http::CredentialScratch& scratch,
                  std::string_view& key) {
  switch (request.credential_form) {
    case CredentialForm::None:
      return false;
    case CredentialForm::ProxyAuthorization:
      return http::proxyAuthorizationKey(request.credential, scratch, key);
    case CredentialForm::Key:
      key = request.credential;
      return !key.empty();
  }
  return false;
}

}  // namespace proxy
}  // namespace sluice
