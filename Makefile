# alloctrack build and test entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
FUZZTIME  ?= 15s
PKGS      := ./...

.PHONY: all build test vet unit fuzz bench bench-parse clean

all: build

build:
	$(GO) build -o bin/alloctrack ./cmd/alloctrack

# Every test: vet, the unit and end-to-end tests with the race detector, and
# a short run of each fuzz target (crashers land in testdata/fuzz and are
# replayed by every later `go test`).
test: vet unit fuzz

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

fuzz:
	$(GO) test ./jdwp       -run '^$$' -fuzz '^FuzzReadPacket$$'     -fuzztime $(FUZZTIME)
	$(GO) test ./ddms       -run '^$$' -fuzz '^FuzzDecodeChunk$$'    -fuzztime $(FUZZTIME)
	$(GO) test ./ddms       -run '^$$' -fuzz '^FuzzDecodePayloads$$' -fuzztime $(FUZZTIME)
	$(GO) test ./alloctrack -run '^$$' -fuzz '^FuzzParse$$'          -fuzztime $(FUZZTIME)

# The benchmarks that hold the speed and memory targets: Parse on the three
# report shapes, Counters.Add on a worst-case maximum report, and /metrics
# for the 16 x 4 farm. BENCHCOUNT runs each that many times (compare runs
# with benchstat).
BENCHCOUNT ?= 5
bench:
	$(GO) test ./alloctrack -run '^$$' -bench '^Benchmark(Parse(Max|MaxLargeTables|Real)|CountersAdd)$$' -benchmem -count $(BENCHCOUNT)
	$(GO) test ./exporter   -run '^$$' -bench '^BenchmarkMetricsRender$$' -benchmem -count $(BENCHCOUNT)

# Parse speed against Google's ddmlib (needs a JDK and libandroid-ddms-java).
bench-parse:
	scripts/bench-parse

clean:
	rm -rf bin
