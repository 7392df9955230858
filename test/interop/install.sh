#!/bin/sh
# Installs what the interop tests need on a fresh Debian machine, as root:
# GStreamer with webrtcbin, libnice, the VP8/H.264/Opus decoders and the Python
# bindings (Debian's python3-gi, used through /usr/bin/python3), and the pinned
# PyPI packages of requirements.txt (aiortc, pytest) for $PYTHON (default python3).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}

pkgs="gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
gstreamer1.0-plugins-bad gstreamer1.0-nice gstreamer1.0-libav
gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 gir1.2-gst-plugins-bad-1.0
python3 python3-gi python3-pip"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get update
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi

# Debian's own Python refuses pip installs (PEP 668) unless told; a pyenv or
# virtualenv Python ignores the variable.
PIP_BREAK_SYSTEM_PACKAGES=1 "$PYTHON" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
