#!/usr/bin/env bash
# Quick start: installs what sluice needs, builds it, writes a default config with a fresh API
# key if there is none, prints how to use it, and runs it in the foreground (Ctrl-C stops it).
#
#   tools/run.sh [-c FILE] [more `sluice run` arguments]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/deps.sh

echo "run: building sluice (bazel build //:sluice)..." >&2
bazel build //:sluice
sluice="$(bazel info bazel-bin 2>/dev/null)/source/exe/sluice"
if [[ ! -x $sluice ]]; then
  echo "run: the build did not produce $sluice" >&2
  exit 1
fi

# Pick the config path out of the arguments so `init` and the hints use the same file.
config="${XDG_CONFIG_HOME:-$HOME/.config}/sluice/config.yaml"
config_given=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -c|--config)
      if ((i + 1 < ${#args[@]})); then
        config=${args[i + 1]}
        config_given=1
      fi
      ;;
    --config=*) config=${args[i]#--config=}; config_given=1 ;;
  esac
done

if [[ ! -e $config ]]; then
  mkdir -p "$(dirname "$config")"
  echo "run: no config at $config: creating one (sluice init)" >&2
  "$sluice" init -c "$config"
fi

# Best-effort read of the short form for the hints; sluice itself is the authority on the file.
read -r key proxy admin < <(/usr/bin/python3 - "$config" <<'PY'
import re
import sys

text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
try:
    import yaml
    doc = yaml.safe_load(text) or {}
except Exception:
    doc = None

def section_value(section, key):
    # A `key: value` line indented under a top-level `section:` line.
    m = re.search(r"^%s:\s*\n((?:[ \t]+.*\n?|\s*\n)*)" % section, text, re.M)
    if not m:
        return None
    v = re.search(r"^[ \t]+%s:\s*[\"']?([^\"'#\s]+)" % key, m.group(1), re.M)
    return v.group(1) if v else None

def first_key_regex():
    m = re.search(r"api_keys:\s*\[\s*[\"']?([^\"',\]\s]+)", text)
    if m:
        return m.group(1)
    m = re.search(r"api_keys:\s*\n(?:\s*#.*\n)*\s*-\s*(.*)", text)
    if not m:
        return None
    item = m.group(1)
    k = re.search(r"key:\s*[\"']?([^\"',}\s]+)", item)
    if k:
        return k.group(1)
    if re.match(r"name:", item):
        k = re.search(r"^\s+key:\s*[\"']?([^\"'\s]+)", text[m.end():], re.M)
        return k.group(1) if k else None
    return item.strip().strip("\"'").split()[0] if item.strip() else None

key = proxy = admin = None
if isinstance(doc, dict):
    keys = ((doc.get("auth") or {}).get("api_keys")) or []
    if keys:
        k = keys[0]
        key = k.get("key") if isinstance(k, dict) else k
    proxy = (doc.get("server") or {}).get("listen")
    admin = (doc.get("admin") or {}).get("listen")
    if admin is False:  # YAML 1.1 reads a bare `off` as false
        admin = "off"
else:
    key = first_key_regex()
    proxy = section_value("server", "listen")
    admin = section_value("admin", "listen")

def local(addr, default):
    addr = str(addr or default)
    for wildcard in ("0.0.0.0:", "[::]:"):
        if addr.startswith(wildcard):
            return "127.0.0.1:" + addr[len(wildcard):]
    return addr

print(key or "-", local(proxy, "127.0.0.1:8080"), local(admin, "127.0.0.1:9901"))
PY
)

if [[ $key == "-" ]]; then
  key_hint="<one of auth.api_keys in $config>"
else
  key_hint=$key
fi

if [[ $admin == off ]]; then
  admin_hint="disabled (admin.listen: off)"
else
  admin_hint="curl http://$admin/stats   (also /ready /health /config_dump /stats/prometheus)"
fi

cat >&2 <<HINT

sluice: config $config
  HTTP through the proxy:    curl -x http://$proxy -U user:$key_hint http://example.com/
  HTTPS (CONNECT tunnel):    curl -x http://$proxy -U user:$key_hint https://example.com/
  Bearer instead of Basic:   curl -x http://$proxy \\
                               --proxy-header 'Proxy-Authorization: Bearer $key_hint' http://example.com/
  Admin:                     $admin_hint
  Stop with Ctrl-C (in-flight requests are drained first).

HINT

if [[ $config_given == 1 ]]; then
  exec "$sluice" run "$@"
fi
exec "$sluice" run -c "$config" "$@"
