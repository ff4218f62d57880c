"""The static list of extensions linked into sluice: name -> Bazel target of its factory."""

SLUICE_EXTENSIONS = {
    # Listener filters
    "sluice.ban": "//filters/listener/ban:config",
    "sluice.ip_allowlist": "//filters/listener/ip_allowlist:config",
    # Network filters
    "sluice.http1": "//filters/network/http1:config",
    # Request filters
    "sluice.auth": "//filters/request/auth:config",
    "sluice.dest_guard": "//filters/request/dest_guard:config",
    "sluice.router": "//filters/request/router:config",
    # In-tree custom extensions
    "sluice.header_rewrite": "//extensions/header_rewrite:config",
}
