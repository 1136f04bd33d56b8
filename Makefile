# alloctrack build and test entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
# Fuzz budgets are counts of executions, not durations: with a duration,
# Go 1.26's fuzz coordinator can report "context deadline exceeded" as a
# failure when the time runs out on a loaded machine (golang/go#75804, fixed
# in Go 1.27). 300,000 runs take 5 to 15 s per target on a 2-core machine.
FUZZTIME  ?= 300000x
PKGS      := ./...

# Version facts stamped into the binary (shown by --version, the startup log
# and alloctrack_build_info). Without them the binary falls back to what the
# Go toolchain recorded (see cmd/alloctrack/buildinfo.go).
VCS_PKG    := github.com/prometheus/common/version
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
BRANCH     ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILD_USER ?= $(shell id -un 2>/dev/null)@$(shell hostname 2>/dev/null)
LDFLAGS    := -X $(VCS_PKG).Version=$(VERSION) -X $(VCS_PKG).Revision=$(REVISION) \
              -X $(VCS_PKG).Branch=$(BRANCH) -X $(VCS_PKG).BuildDate=$(BUILD_DATE) \
              -X $(VCS_PKG).BuildUser=$(BUILD_USER)

.PHONY: all build test vet unit fuzz bench bench-parse clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/alloctrack ./cmd/alloctrack

# Every test: vet, the unit and end-to-end tests with the race detector, and
# a short run of each fuzz target (crashers land in testdata/fuzz and are
# replayed by every later `go test`).
test: vet unit fuzz

vet:
	$(GO) vet $(PKGS)

# tools/testsum prints each package's result, the output of failed tests
# only, and each skipped test with its reason; it exits as go test did.
unit:
	$(GO) build -o bin/testsum ./tools/testsum
	bin/testsum $(GO) test -json -race -count=1 -timeout 15m $(PKGS)

fuzz:
	$(GO) test ./jdwp       -run '^$$' -fuzz '^FuzzReadPacket$$'     -fuzztime $(FUZZTIME)
	$(GO) test ./ddms       -run '^$$' -fuzz '^FuzzDecodeChunk$$'    -fuzztime $(FUZZTIME)
	$(GO) test ./ddms       -run '^$$' -fuzz '^FuzzDecodePayloads$$' -fuzztime $(FUZZTIME)
	$(GO) test ./ddms/allocreport -run '^$$' -fuzz '^FuzzParse$$'    -fuzztime $(FUZZTIME)
	$(GO) test ./perfetto   -run '^$$' -fuzz '^FuzzDecodeTrace$$'    -fuzztime $(FUZZTIME)
	$(GO) test ./ddms/hprof -run '^$$' -fuzz '^FuzzReader$$'         -fuzztime $(FUZZTIME)
	$(GO) test ./ddms/hprof -run '^$$' -fuzz '^FuzzConvertStandard$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzParseAppProcesses$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzReadStatusAndLength$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzParseDevices$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzParseDevicesLong$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzParsePIDs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzParsePS$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzShellV2$$' -fuzztime $(FUZZTIME)
	$(GO) test ./adb        -run '^$$' -fuzz '^FuzzSyncReplies$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tialloc    -run '^$$' -fuzz '^FuzzParse$$'          -fuzztime $(FUZZTIME)
	$(GO) test ./apk        -run '^$$' -fuzz '^FuzzManifestVersion$$' -fuzztime $(FUZZTIME)
	$(GO) test ./instrument -run '^$$' -fuzz '^FuzzParseInstrument$$' -fuzztime $(FUZZTIME)
	$(GO) test ./instrument -run '^$$' -fuzz '^FuzzParseLogcat$$'     -fuzztime $(FUZZTIME)

# The benchmarks that hold the speed and memory targets: Parse on the three
# report shapes, Counters.Add on a worst-case maximum report, and /metrics
# for the 16 x 4 farm. BENCHCOUNT runs each that many times (compare runs
# with benchstat).
BENCHCOUNT ?= 5
bench:
	$(GO) test ./ddms/allocreport -run '^$$' -bench '^BenchmarkParse(Max|MaxLargeTables|Real)(Reusing)?$$' -benchmem -count $(BENCHCOUNT)
	$(GO) test ./alloctrack/ddm -run '^$$' -bench '^BenchmarkCountersAdd$$' -benchmem -count $(BENCHCOUNT)
	$(GO) test ./exporter   -run '^$$' -bench '^BenchmarkMetricsRender$$' -benchmem -count $(BENCHCOUNT)

# Parse speed against Google's ddmlib (needs a JDK and libandroid-ddms-java).
bench-parse:
	scripts/bench-parse

clean:
	rm -rf bin
