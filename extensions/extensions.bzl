"""The static list of extensions linked into sluice: name -> Bazel target of its factory."""

SLUICE_EXTENSIONS = {
    # Listener filters
    "sluice.ban": "//filters/listener/ban:config",
    "sluice.ip_allowlist": "//filters/listener/ip_allowlist:config",
    "sluice.protocol_sniffer": "//filters/listener/protocol_sniffer:config",
    "sluice.proxy_protocol": "//filters/listener/proxy_protocol:config",
    # Transport sockets
    "sluice.tls": "//transport_sockets/tls:config",
    # Network filters
    "sluice.http1": "//filters/network/http1:config",
    "sluice.http2": "//filters/network/http2:config",
    "sluice.socks5": "//filters/network/socks5:config",
    # Request filters
    "sluice.auth": "//filters/request/auth:config",
    "sluice.dest_guard": "//filters/request/dest_guard:config",
    "sluice.router": "//filters/request/router:config",
    # In-tree custom extensions
    "sluice.header_rewrite": "//extensions/header_rewrite:config",
}
