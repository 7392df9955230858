#!/usr/bin/env bash
# Installs the independent MoQ Transport implementation the WebTransport interop
# test talks to: moq-clock-ietf 0.6.25 from crates.io (moq-transport 0.17, MoQT
# draft-ietf-moq-transport-18), into ~/.cargo/bin. Idempotent: an installed copy
# of that version is kept, so the ~10-minute cargo build happens once per machine.
# Without a Rust toolchain new enough (>= 1.85, edition 2024) it says so and
# exits 0: the Go test then skips with a message.
set -euo pipefail
VERSION=0.6.25
CRATE=moq-clock-ietf
export PATH="$HOME/.cargo/bin:$PATH"

if grep -qs "\"$CRATE $VERSION " "$HOME/.cargo/.crates.toml" && [ -x "$HOME/.cargo/bin/$CRATE" ]; then
	exit 0
fi
if ! command -v cargo >/dev/null 2>&1; then
	echo "moq-install: no cargo (a Rust >= 1.85 toolchain is needed; Debian bookworm's 1.63 is too old): the MoQ interop test will skip" >&2
	exit 0
fi
minor=$(rustc --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\).*/\1/p')
if [ -z "$minor" ] || [ "$minor" -lt 85 ]; then
	echo "moq-install: rustc $(rustc --version 2>/dev/null) is older than 1.85: the MoQ interop test will skip" >&2
	exit 0
fi
echo "moq-install: cargo install $CRATE $VERSION (once per machine, several minutes)"
nice -n 10 cargo install "$CRATE" --version "$VERSION" --locked -j 2
