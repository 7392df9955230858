# Petrel: `make run` starts the server with embedded defaults, `make test` runs
# every test (installing the browsers and tools the tests need on Debian).

GO      ?= go
BIN     := bin/petrel
GOFILES := $(shell find . -name '*.go' -not -path './web/node_modules/*' -not -path './test/browser/node_modules/*')
WEBSRC  := $(shell find web/sdk web/app -type f 2>/dev/null) web/build.mjs web/package.json

.PHONY: run build web test test-web test-go test-integration test-lab test-browser test-interop deps fuzz bench clean

run: build
	$(BIN) serve

build: web $(BIN)

$(BIN): $(GOFILES) go.mod go.sum web/dist/index.html lab/notes.md
	$(GO) build -o $(BIN) ./cmd/petrel

web: web/dist/index.html

web/dist/index.html: $(WEBSRC) web/node_modules/.package-lock.json
	cd web && npm run build

web/node_modules/.package-lock.json: web/package-lock.json
	cd web && npm ci --no-audit --no-fund

# Everything: unit and integration tests, the network lab, real browsers and
# independent WebRTC stacks.
test: deps build test-web test-go test-browser test-interop
	@echo "make test: all suites passed"

# Installs what the tests need (Debian, as root). Idempotent and quick when done.
deps:
	bash scripts/install-deps.sh

# Go unit tests, integration tests against the in-process server, the network lab.
# Packages whose tests time real-time media or emulated links run one at a time,
# so they do not starve each other of the two cores; the rest (the hostile
# harness, recordings, cameras, units) two at a time.
# `go vet ./...` checks everything go test's own vet pass would.
TIMED_PKGS := ./lab ./netem ./loadtest ./test/integration ./test/cluster ./webtransport ./rtc/datachan ./session
test-go:
	$(GO) vet ./...
	$(GO) test -vet=off -p 1 -count=1 -timeout 20m $(TIMED_PKGS)
	$(GO) test -vet=off -p 2 -count=1 -timeout 20m $$($(GO) list ./... | grep -vxF "$$($(GO) list $(TIMED_PKGS))")

# The SDK's and app's unit tests (node --test on the compiled TypeScript).
test-web: web/node_modules/.package-lock.json
	cd web && npm test

test-browser: build
	cd test/browser && PETREL_SKIP_BUILD=1 npm test

test-interop: build
	bash test/interop/run.sh

# Short fuzzing of every parser of network input.
fuzz:
	$(GO) test ./protocol -run XXX -fuzz FuzzParse -fuzztime 20s
	$(GO) test ./sfu -run XXX -fuzz FuzzParseData -fuzztime 20s
	$(GO) test ./signal -run XXX -fuzz FuzzParseFrag -fuzztime 20s
	$(GO) test ./auth -run XXX -fuzz FuzzVerify -fuzztime 20s
	$(GO) test ./webtransport/moqt -run XXX -fuzz '^FuzzControlMessage$$' -fuzztime 20s
	$(GO) test ./webtransport/moqt -run XXX -fuzz '^FuzzDatagram$$' -fuzztime 20s
	$(GO) test ./webtransport/moqt -run XXX -fuzz '^FuzzSubgroupStream$$' -fuzztime 20s
	$(GO) test ./camera -run XXX -fuzz '^FuzzRTSPDescription$$' -fuzztime 20s
	$(GO) test ./camera -run XXX -fuzz '^FuzzRTPPush$$' -fuzztime 20s
	$(GO) test ./rtc/datachan -run XXX -fuzz FuzzAssociation -fuzztime 20s
	$(GO) test ./rtc/datachan -run XXX -fuzz FuzzDCEP -fuzztime 20s
	$(GO) test ./rtc/dtlsrec -run XXX -fuzz FuzzRecords -fuzztime 20s
	$(GO) test ./rtc/lean -run XXX -fuzz FuzzBinding -fuzztime 20s
	$(GO) test ./session -run XXX -fuzz 'FuzzOffer$$' -fuzztime 20s
	$(GO) test ./session -run XXX -fuzz 'FuzzAnswer$$' -fuzztime 20s

bench: build
	$(GO) test -run XXX -bench . -benchmem ./sfu ./bench
	bash bench/run.sh

clean:
	rm -rf bin out web/dist/*.js web/dist/*.css web/dist/*.html web/dist/*.map
