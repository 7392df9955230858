#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (as root):
# browsers, GStreamer with webrtcbin, Python with aiortc, Node packages,
# gnuplot for the reports' plots.
# Each step is skipped when already satisfied, so repeated runs are quick.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in chromium firefox-esr iproute2 ffmpeg \
	gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
	gstreamer1.0-plugins-bad gstreamer1.0-nice gstreamer1.0-libav \
	gir1.2-gst-plugins-bad-1.0 gir1.2-gst-plugins-base-1.0 python3-gi redis-server strace gnuplot-nox \
	libopus-dev pkg-config; do
	dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
	echo "install-deps: apt-get install ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

for dir in web test/browser; do
	if [ -f "$dir/package-lock.json" ] && ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.json" 2>/dev/null; then
		echo "install-deps: npm ci in $dir"
		(cd "$dir" && npm ci --no-audit --no-fund)
	fi
done

if [ -f test/interop/install.sh ]; then
	bash test/interop/install.sh
fi

# moq-clock-ietf (crates.io, MoQT draft-18) for the WebTransport interop test:
# built once per machine into ~/.cargo/bin when a recent Rust toolchain exists.
if [ -f test/interop/moq-install.sh ]; then
	bash test/interop/moq-install.sh
fi
